package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"switchyard/router/config"
)

// backend is one configured upstream as the current configuration sees
// it; rt carries what survives reloads.
type backend struct {
	name string
	cfg  config.Backend
	// base is the URL without a trailing slash; request paths append to it.
	base string
	// baseURL is base parsed once, when it needs nothing but a path
	// appended (nil otherwise: each send parses base+path).
	baseURL *url.URL
	// sendKey is the host:port of a plain http:// base (empty otherwise),
	// whose requests the builtin client takes as a rendered Head; sendPath
	// is that base's path as sent, which request paths follow.
	sendKey, sendPath string
	// shim: listed in a dynamo.shim pool, so never a fallback target.
	shim bool
	rt   *runtime
	// rw rewrites the chat bodies sent to it (nil: none); rebuilt with
	// the state on every reload.
	rw *promptRewrite
}

// usable reports whether a request with key may be sent to b now.
func (b *backend) usable(k *apiKey, now time.Time) bool {
	return b.cfg.IsEnabled() && b.rt.healthy.Load() && b.rt.breaker.ready(now) && k.allows(b.name)
}

// plainBase parses a backend's base URL for newRequest, or says nil when
// appending a path to it takes url.Parse (escapes, a query, user info).
func plainBase(base string) *url.URL {
	u, err := url.Parse(base)
	if err != nil || u.Opaque != "" || u.RawPath != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" ||
		u.User != nil || u.Host == "" || strings.HasSuffix(u.Host, ":") {
		return nil
	}
	return u
}

// newRequest is the POST of body to path (with the client's query) on b,
// built from the parsed base rather than by parsing base+path anew.
func (b *backend) newRequest(ctx context.Context, path, rawQuery string, body []byte) (*http.Request, error) {
	if b.baseURL == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+path, bytes.NewReader(body))
		if err == nil {
			req.URL.RawQuery = rawQuery
		}
		return req, err
	}
	// The request, its URL and its body in one allocation.
	o := &outbound{url: *b.baseURL}
	o.url.Path += path
	o.url.RawQuery = rawQuery
	o.body.Reset(body)
	o.req = http.Request{
		Method: http.MethodPost, URL: &o.url, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Host: o.url.Host, ContentLength: int64(len(body)), // the caller sets Header
		Body:    &o.body,
		GetBody: o.reopen,
	}
	if len(body) == 0 {
		o.req.Body = http.NoBody
	}
	o.req = *o.req.WithContext(ctx) // in place: one Request on the heap, not two
	return &o.req, nil
}

// outbound is an upstream request with what it points to.
type outbound struct {
	req  http.Request
	url  url.URL
	body bodyReader
}

// reopen is the request's GetBody: the same bytes from the start.
func (o *outbound) reopen() (io.ReadCloser, error) {
	if o.req.ContentLength == 0 {
		return http.NoBody, nil
	}
	r := &bodyReader{}
	r.Reset(o.body.data)
	return r, nil
}

// bodyReader reads a request body held in memory; closing it is a no-op.
type bodyReader struct {
	bytes.Reader
	data []byte
}

func (r *bodyReader) Reset(b []byte) { r.data = b; r.Reader.Reset(b) }
func (r *bodyReader) Close() error   { return nil }

func (b *backend) timeout() time.Duration {
	return orDefault(b.cfg.Timeout.Std(), config.DefaultBackendTimeout)
}

// rotation spreads requests over interchangeable backends round-robin.
type rotation struct {
	members []*backend
	next    atomic.Uint64
}

// candidates lists the members usable now, starting at the next turn, so
// retries walk on to the following members. They are appended to buf.
func (r *rotation) candidates(buf []*backend, k *apiKey, now time.Time) []*backend {
	n := len(r.members)
	if n == 0 {
		return nil
	}
	start := int((r.next.Add(1) - 1) % uint64(n))
	out := buf[:0]
	for i := range n {
		if b := r.members[(start+i)%n]; b.usable(k, now) {
			out = append(out, b)
		}
	}
	return out
}

// anyUsable reports whether some member is usable, without taking a turn.
func (r *rotation) anyUsable(k *apiKey, now time.Time) bool {
	return slices.ContainsFunc(r.members, func(b *backend) bool { return b.usable(k, now) })
}

// allowsAny reports whether the key may use some member at all.
func (r *rotation) allowsAny(k *apiKey) bool {
	return slices.ContainsFunc(r.members, func(b *backend) bool { return k.allows(b.name) })
}

// pool is the shim replicas of one Dynamo namespace.
type pool struct {
	namespace string
	rotation
}

// state is everything one configuration says about routing. Requests
// load it once and keep it, so a reload never changes a request midway.
type state struct {
	cfg      *config.Config
	backends []*backend
	pools    []*pool
	poolByNS map[string]*pool
	// unified maps a client model id to the backends that list it (role
	// unified, not internal, enabled); fallback is the same without shim
	// replicas.
	unified  map[string]*rotation
	fallback map[string]*rotation
	// modelMap is dynamo.shim.model_map; reverse maps a Dynamo display
	// name back to the client ids that map to it, for /v1/models.
	modelMap map[string]string
	reverse  map[string][]string
	keys     []apiKey
	// namespaces lists every pool's namespace in order: usableNamespaces'
	// answer when all are usable, shared and never modified.
	namespaces []string
	// pinning: Dynamo and disaggregated serving are on and a pool exists.
	pinning bool
}

// buildState resolves cfg against the runtimes of the previous state.
// It returns the runtimes it no longer uses, for the caller to close.
func buildState(cfg *config.Config, old map[string]*runtime, p *prober) (*state, []*runtime) {
	st := &state{
		cfg:      cfg,
		poolByNS: map[string]*pool{},
		unified:  map[string]*rotation{},
		fallback: map[string]*rotation{},
		modelMap: cfg.Dynamo.Shim.ModelMap,
		reverse:  map[string][]string{},
		keys:     newAPIKeys(cfg.APIKeys),
	}
	byName := map[string]*backend{}
	kept := map[*runtime]bool{}
	for _, bc := range cfg.Backends {
		b := &backend{name: bc.Name, cfg: bc, base: strings.TrimRight(bc.URL, "/"), rw: newPromptRewrite(bc)}
		b.baseURL = plainBase(b.base)
		if u := b.baseURL; u != nil && u.Scheme == "http" {
			b.sendKey, b.sendPath = u.Host, u.EscapedPath()
			if u.Port() == "" {
				b.sendKey = net.JoinHostPort(u.Hostname(), "80")
			}
		}
		if rt := old[bc.Name]; rt != nil && rt.fits(b.name, b.base, bc) {
			b.rt = rt
		} else {
			b.rt = p.newRuntime(b.name, b.base, bc)
		}
		kept[b.rt] = true
		st.backends = append(st.backends, b)
		byName[b.name] = b
	}

	for _, sp := range cfg.ShimPools() {
		pl := &pool{namespace: sp.Namespace}
		for _, name := range sp.Backends {
			if b := byName[name]; b != nil {
				b.shim = true
				pl.members = append(pl.members, b)
			}
		}
		if len(pl.members) > 0 && st.poolByNS[pl.namespace] == nil {
			st.pools = append(st.pools, pl)
			st.poolByNS[pl.namespace] = pl
			st.namespaces = append(st.namespaces, pl.namespace)
		}
	}
	st.pinning = cfg.Dynamo.Enabled && cfg.DisaggregatedServing.Enabled && len(st.pools) > 0

	for _, b := range st.backends {
		if !b.cfg.IsEnabled() || b.cfg.Internal || b.cfg.Role != config.RoleUnified {
			continue
		}
		for _, m := range b.cfg.Models {
			addMember(st.unified, m, b)
			if !b.shim {
				addMember(st.fallback, m, b)
			}
		}
	}
	for client, display := range st.modelMap {
		st.reverse[display] = append(st.reverse[display], client)
	}
	for _, ids := range st.reverse {
		slices.Sort(ids)
	}

	var stale []*runtime
	for _, rt := range old {
		if !kept[rt] {
			stale = append(stale, rt)
		}
	}
	return st, stale
}

func addMember(m map[string]*rotation, model string, b *backend) {
	r := m[model]
	if r == nil {
		r = &rotation{}
		m[model] = r
	}
	if !slices.Contains(r.members, b) {
		r.members = append(r.members, b)
	}
}

// runtimes indexes a state's runtimes by backend name.
func (st *state) runtimes() map[string]*runtime {
	out := make(map[string]*runtime, len(st.backends))
	for _, b := range st.backends {
		out[b.name] = b.rt
	}
	return out
}

// dynamoModel is the name workers are matched on: the model_map entry for
// the client's id, or the id itself.
func (st *state) dynamoModel(client string) string {
	if m, ok := st.modelMap[client]; ok {
		return m
	}
	return client
}

// renderReplica is the backend whose view of a chat body prompt rendering
// takes: the first shim replica of the first of the namespaces a request
// may be pinned to, nil when none.
func (st *state) renderReplica(namespaces []string) *backend {
	if len(namespaces) == 0 {
		return nil
	}
	if pl := st.poolByNS[namespaces[0]]; pl != nil && len(pl.members) > 0 {
		return pl.members[0]
	}
	return nil
}

// usableNamespaces lists, in configuration order, the namespaces whose
// pool has a replica the request could use now: the picker's candidates.
// The usual answer, every pool, is one shared slice: callers only read it.
func (st *state) usableNamespaces(k *apiKey, now time.Time) []string {
	var out []string
	for i, p := range st.pools {
		switch usable := p.anyUsable(k, now); {
		case out != nil:
			if usable {
				out = append(out, p.namespace)
			}
		case !usable:
			out = append(make([]string, 0, len(st.pools)-1), st.namespaces[:i]...)
		}
	}
	if out == nil {
		return st.namespaces[:len(st.namespaces):len(st.namespaces)]
	}
	return out
}
