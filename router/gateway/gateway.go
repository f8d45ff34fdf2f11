// Package gateway is Switchyard's HTTP ingress: OpenAI chat and text
// completions, Anthropic Messages and OpenAI Responses (converted to chat
// completions, or passed through). It authenticates clients, routes each
// request either
// through a Dynamo direct-mode frontend (a "shim") with the picker's
// worker pins in x-dynamo-* headers, or to a unified backend that lists
// the model, and relays buffered and streaming (SSE) answers.
//
// Backends are actively health-checked and guarded by circuit breakers;
// a connection failure moves a request to another replica of the same
// pool with the same pins, and a failed pinned request may fall back to
// a unified backend. Client-supplied x-dynamo-* headers and
// nvext.token_data never reach an upstream, and no x-dynamo-* header
// reaches a client.
package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/metrics"
	"switchyard/router/picker"
)

// Snapshotter gives the current fleet view; *discovery.Registry is one.
type Snapshotter interface {
	Snapshot() *discovery.Snapshot
}

// Pinner chooses the workers a request is pinned to and hears when a
// pinned request ended: the routing core, as its host serialises it (the
// live server's core.Shared). Each selection is reported to the same
// Pinner once: through Finished when its answer was delivered in full,
// through Ended otherwise.
type Pinner interface {
	Pick(req picker.Request) (picker.Selection, bool)
	Ended(req picker.Request, sel picker.Selection)
	Finished(req picker.Request, sel picker.Selection)
}

// Prompter renders and tokenizes a request body for the KV-aware picker
// (router/prompt.Service): chat is a chat completions body, otherwise a
// completions body. It returns the token ids, or nil and why (a KV
// selection result).
type Prompter interface {
	Tokens(ctx context.Context, model string, chat bool, body []byte) ([]uint32, string)
}

// Options are the gateway's collaborators. Registry and Pinner may be nil
// only when Dynamo is never enabled: nothing is then pinned.
type Options struct {
	Registry Snapshotter
	Pinner   Pinner
	// Prompter, when set, renders prompts while dynamo.kv.enabled, so the
	// KV-aware picker scores prefix overlap on client requests.
	Prompter Prompter
	// Metrics defaults to a private, unregistered set.
	Metrics *metrics.Gateway
	Log     *slog.Logger
	// Clock stamps picker requests and drives breakers and probe
	// intervals; it defaults to the wall clock.
	Clock clock.Clock
	// Estimator sizes prompts for the picker; it defaults to the heuristic.
	Estimator picker.Estimator
	// OnOutcome, when set, is called once per pinned request as its
	// pinned attempt ends (see Outcome). nil costs nothing.
	OnOutcome func(Outcome)
}

// Gateway serves the /v1 routes. It is safe for concurrent use; Reload
// swaps its configuration between requests.
type Gateway struct {
	registry  Snapshotter
	pinner    Pinner
	prompter  Prompter
	metrics   *metrics.Gateway
	log       *slog.Logger
	clock     clock.Clock
	est       picker.Estimator
	onOutcome func(Outcome)
	transport *upstreams
	prober    *prober

	st  atomic.Pointer[state]
	ids atomic.Uint64
	// inflight counts running handlers, so Close can wait for them to
	// return their upstream connections before dropping idle ones.
	inflight sync.WaitGroup
	// running counts inference requests, against gateway.max_in_flight;
	// parseSlots bounds the bodies parsed at once.
	running    atomic.Int64
	parseSlots chan struct{}
	// bodies counts the request-body bytes held, against
	// gateway.max_buffered_body_bytes.
	bodies bodyBudget

	mu     sync.Mutex // serializes Reload and Close
	closed bool
}

// New builds a gateway for cfg, which must have passed Validate, and
// starts its health checks. The caller owns Close.
func New(cfg *config.Config, o Options) *Gateway {
	if o.Metrics == nil {
		o.Metrics = metrics.New().Gateway
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Estimator == nil {
		o.Estimator = picker.Heuristic{}
	}
	t := newUpstreams()
	g := &Gateway{
		registry: o.Registry, pinner: o.Pinner, prompter: o.Prompter, metrics: o.Metrics, log: o.Log,
		clock: o.Clock, est: o.Estimator, onOutcome: o.OnOutcome, transport: t,
		parseSlots: newParseSlots(),
	}
	g.prober = &prober{
		// Probes never follow redirects: a health route that redirects is
		// misconfigured, and following it could leave the backend's host.
		client: &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		clock:  o.Clock, log: o.Log.With("component", "gateway"), healthy: o.Metrics.SetHealthy,
	}
	g.install(cfg, nil)
	return g
}

// Reload installs a new (validated) configuration. Backends whose URL,
// health check and breaker settings are unchanged keep their health and
// breaker state; requests already running finish under the old one.
func (g *Gateway) Reload(cfg *config.Config) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	g.install(cfg, g.st.Load().runtimes())
}

func (g *Gateway) install(cfg *config.Config, old map[string]*runtime) {
	names := make([]string, len(cfg.Backends))
	for i, b := range cfg.Backends {
		names[i] = b.Name
	}
	g.metrics.SetBackends(names)
	g.transport.configure(cfg.Gateway)
	st, stale := buildState(cfg, old, g.prober)
	g.st.Store(st)
	for _, rt := range stale {
		rt.close()
	}
	// A stale probe may have written its gauge after the new runtime did.
	for _, b := range st.backends {
		g.metrics.SetHealthy(b.name, b.rt.healthy.Load())
	}
}

// closeWait bounds how long Close waits for handlers still running.
const closeWait = 10 * time.Second

// Close stops the health checks, waits (boundedly) for running handlers
// and drops idle upstream connections. Call it once the HTTP server
// accepts no more requests (after Shutdown, or Close when the grace ran
// out, which cancels the handlers still running).
func (g *Gateway) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	g.closed = true
	for _, rt := range g.st.Load().runtimes() {
		rt.close()
	}
	done := make(chan struct{})
	go func() {
		g.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeWait):
		g.log.Warn("gateway closed with requests still running")
	}
	g.transport.CloseIdleConnections()
}

// snapshot is the current fleet view, empty without a registry.
func (g *Gateway) snapshot() *discovery.Snapshot {
	if g.registry == nil {
		return &discovery.Snapshot{}
	}
	return g.registry.Snapshot()
}
