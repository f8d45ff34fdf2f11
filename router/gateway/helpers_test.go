package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/metrics"
	"switchyard/router/picker"
)

// recorded is one request a test upstream received.
type recorded struct {
	Path   string
	Query  string
	Header http.Header
	Body   []byte
}

// upstream is a test backend speaking the OpenAI wire: buffered JSON, or
// SSE for stream: true. It records every request, answers /health with a
// settable status, and misbehaves the way a hostile or leaky frontend
// might: it echoes x-dynamo-* headers and spoofs the disclosure headers.
type upstream struct {
	name string
	srv  *httptest.Server

	mu      sync.Mutex
	got     []recorded
	respond func(w http.ResponseWriter, r *http.Request, body []byte)

	health atomic.Int32
}

func newUpstream(t *testing.T, name string) *upstream {
	u := &upstream{name: name}
	u.health.Store(http.StatusOK)
	u.srv = httptest.NewServer(u)
	t.Cleanup(u.srv.Close)
	return u
}

// setRespond replaces the default OpenAI answer.
func (u *upstream) setRespond(f func(w http.ResponseWriter, r *http.Request, body []byte)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.respond = f
}

func (u *upstream) requests() []recorded {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.got)
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/health" {
		w.WriteHeader(int(u.health.Load()))
		return
	}
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.got = append(u.got, recorded{Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
	respond := u.respond
	u.mu.Unlock()
	h := w.Header()
	h.Set("X-Dynamo-Worker-Instance-Id", "666")
	h.Set("X-Dynamo-Routing-Mode", "disaggregated")
	h.Set("X-Worker-Instance-Id", "666")
	h.Set("X-Switchyard-Backend", "spoofed")
	if respond != nil {
		respond(w, r, body)
		return
	}
	answer(w, r, body, "hello from "+u.name)
}

// answer writes an OpenAI chat or text completion saying text, as JSON or,
// when the request asks to stream, as SSE split into words.
func answer(w http.ResponseWriter, r *http.Request, body []byte, text string) {
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.Unmarshal(body, &req)
	chat := r.URL.Path == pathChat
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(completion(chat, req.Model, text, "stop"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	words := strings.SplitAfter(text, " ")
	for i, word := range words {
		finish := ""
		if i == len(words)-1 {
			finish = "stop"
		}
		writeEvent(w, chunk(chat, req.Model, word, finish))
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

func writeEvent(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
	w.(http.Flusher).Flush()
}

func completion(chat bool, model, text, finish string) map[string]any {
	if chat {
		return map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil,
				"message": map[string]any{"role": "assistant", "content": text, "refusal": nil}}},
			"usage": map[string]any{"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}}
	}
	return map[string]any{"id": "cmpl-1", "object": "text_completion", "created": 1, "model": model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil, "text": text}}}
}

func chunk(chat bool, model, text, finish string) map[string]any {
	var fr any
	if finish != "" {
		fr = finish
	}
	if chat {
		return map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": fr, "delta": map[string]any{"content": text}}}}
	}
	return map[string]any{"id": "cmpl-1", "object": "text_completion", "created": 1, "model": model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": fr, "text": text, "logprobs": nil}}}
}

// respondStatus answers every request with status and an OpenAI error.
func respondStatus(status int, msg string) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(errorJSON(status, "upstream", msg))
	}
}

// deadURL is the address of a port nothing listens on.
func deadURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
}

// rrPicker is a test double with the real picker's shape: over workers of
// the request's model in the offered namespaces, the first namespace with
// one wins, decode workers before aggregated ones, round-robin; a decode
// worker is paired with its namespace's first prefill worker. It records
// every Pick and Ended.
// testPinner is the gateway's Pinner over a registry and a test picker
// that can be swapped: it observes the gateway's side of the contract
// (what it asks, what it reports ended) without a routing core. Pickers
// without an Ended method hear nothing.
type testPinner struct {
	reg Snapshotter
	mu  sync.Mutex
	p   picker.Picker
}

func newTestPinner(reg Snapshotter, p picker.Picker) *testPinner { return &testPinner{reg: reg, p: p} }

func (t *testPinner) set(p picker.Picker) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.p = p
}

func (t *testPinner) get() picker.Picker {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.p
}

func (t *testPinner) Pick(req picker.Request) (picker.Selection, bool) {
	return t.get().Pick(req, t.reg.Snapshot())
}

func (t *testPinner) Ended(req picker.Request, sel picker.Selection) {
	if e, ok := t.get().(interface {
		Ended(picker.Request, picker.Selection)
	}); ok {
		e.Ended(req, sel)
	}
}

func (t *testPinner) Finished(req picker.Request, sel picker.Selection) {
	if f, ok := t.get().(interface {
		Finished(picker.Request, picker.Selection)
	}); ok {
		f.Finished(req, sel)
	}
}

// FirstToken passes a first token on to pickers that hear of them.
func (t *testPinner) FirstToken(id uint64) {
	if f, ok := t.get().(FirstTokener); ok {
		f.FirstToken(id)
	}
}

type rrPicker struct {
	mu sync.Mutex
	// events are "first_token" and "finished" in the order they came.
	events []string
	next   int
	picks  []picker.Request
	sels   []picker.Selection
	ended  []picker.Selection
	// finished: selections whose answers were delivered in full.
	finished []picker.Selection
	refuse   bool // answer ok=false, as when no worker serves the model
}

func (p *rrPicker) Pick(req picker.Request, snap *discovery.Snapshot) (picker.Selection, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.picks = append(p.picks, req)
	if p.refuse {
		return picker.Selection{}, false
	}
	for _, ns := range req.Namespaces {
		var decode, agg, prefill []*discovery.Worker
		for _, w := range snap.Workers {
			if w.Namespace != ns || w.Model != req.Model {
				continue
			}
			switch w.Role {
			case discovery.RoleDecode:
				decode = append(decode, w)
			case discovery.RoleAggregated:
				agg = append(agg, w)
			case discovery.RolePrefill:
				prefill = append(prefill, w)
			}
		}
		cands := decode
		if len(cands) == 0 {
			cands = agg
		}
		if len(cands) == 0 {
			continue
		}
		w := cands[p.next%len(cands)]
		p.next++
		sel := picker.Selection{Namespace: ns, Decode: pinOf(w), DecodeReason: picker.ReasonRoundRobin, PrefillReason: picker.ReasonNoPrefillPool}
		if w.Role == discovery.RoleDecode && len(prefill) > 0 {
			sel.Prefill, sel.HasPrefill, sel.PrefillReason = pinOf(prefill[0]), true, picker.ReasonRoundRobin
		}
		p.sels = append(p.sels, sel)
		return sel, true
	}
	return picker.Selection{}, false
}

func pinOf(w *discovery.Worker) picker.Pin {
	return picker.Pin{WorkerID: w.InstanceID, DPRank: w.Runtime.DPStartRank, DPDeclared: w.Runtime.DPDeclared, Role: w.Role}
}

func (p *rrPicker) Ended(_ picker.Request, sel picker.Selection) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = append(p.ended, sel)
}

func (p *rrPicker) Finished(_ picker.Request, sel picker.Selection) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished = append(p.finished, sel)
	p.events = append(p.events, "finished")
}

func (p *rrPicker) FirstToken(uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, "first_token")
}

func (p *rrPicker) eventList() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

func (p *rrPicker) finishedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.finished)
}

func (p *rrPicker) counts() (picks, ended int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.picks), len(p.ended)
}

func (p *rrPicker) lastPick() picker.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.picks[len(p.picks)-1]
}

func (p *rrPicker) lastSelection() picker.Selection {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sels[len(p.sels)-1]
}

// Worker ids above 2^53 catch any float or hex formatting on the way.
const (
	prefillID uint64 = 18446744073709551557
	decodeID  uint64 = 9007199254740993
	aggID     uint64 = 7465265302745285
)

func worker(ns string, id uint64, role discovery.Role, model string) *discovery.Worker {
	return &discovery.Worker{Namespace: ns, InstanceID: id, Role: role, Model: model, BlockSize: 16, HasCard: true}
}

// withDP declares data_parallel_size on a worker, starting at rank.
func withDP(w *discovery.Worker, rank uint32) *discovery.Worker {
	w.Runtime.DPDeclared, w.Runtime.DPSize, w.Runtime.DPStartRank = true, 1, rank
	return w
}

// publish installs workers in a real registry, sorted as discovery sorts them.
func publish(reg *discovery.Registry, workers ...*discovery.Worker) {
	ws := slices.Clone(workers)
	slices.SortFunc(ws, func(a, b *discovery.Worker) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		switch {
		case a.InstanceID < b.InstanceID:
			return -1
		case a.InstanceID > b.InstanceID:
			return 1
		}
		return 0
	})
	reg.Publish(&discovery.View{Workers: ws}, time.Now())
}

// backendFor is a defaulted backends[] entry for a test upstream.
func backendFor(u *upstream, models ...string) config.Backend {
	b := config.DefaultBackend()
	b.Name, b.URL, b.Models = u.name, u.srv.URL, models
	return b
}

// dynamoConfig is a valid configuration with Dynamo and disaggregated
// serving on; shims name the single namespace's pool.
func dynamoConfig(shims []string, backends ...config.Backend) *config.Config {
	c := config.Default()
	c.Backends = backends
	c.DisaggregatedServing.Enabled = true
	c.Dynamo.Enabled = true
	c.Dynamo.Discovery.Etcd.Endpoints = []string{"http://127.0.0.1:2379"}
	c.Dynamo.Load.DirectAllowCIDRs = []string{"127.0.0.0/8"}
	c.Dynamo.Shim.Backends = shims
	return c
}

// fixture is a gateway behind a real HTTP server, over a real registry.
type fixture struct {
	t       *testing.T
	gw      *Gateway
	srv     *httptest.Server
	reg     *discovery.Registry
	picker  *rrPicker
	pinner  *testPinner
	metrics *metrics.Set
}

type fixtureOptions struct {
	clock clock.Clock
	// readTimeout is the server's ReadTimeout; streams must outlive it.
	readTimeout time.Duration
	onOutcome   func(Outcome)
	log         *slog.Logger
	prompter    Prompter
}

func newFixture(t *testing.T, cfg *config.Config, workers []*discovery.Worker, opts ...func(*fixtureOptions)) *fixture {
	t.Helper()
	errs, _ := cfg.Validate()
	require.Empty(t, errs, "test configuration must be valid")
	o := fixtureOptions{clock: clock.Real{}, readTimeout: 500 * time.Millisecond, log: slog.New(slog.DiscardHandler)}
	for _, f := range opts {
		f(&o)
	}
	reg := discovery.NewRegistry()
	publish(reg, workers...)
	f := &fixture{t: t, reg: reg, picker: &rrPicker{}, metrics: metrics.New()}
	f.pinner = newTestPinner(reg, f.picker)
	f.gw = New(cfg, Options{
		Registry: reg, Pinner: f.pinner, Metrics: f.metrics.Gateway,
		Log: o.log, Clock: o.clock, OnOutcome: o.onOutcome, Prompter: o.prompter,
	})
	mux := http.NewServeMux()
	mux.Handle("/v1/", f.gw.Handler())
	f.srv = httptest.NewUnstartedServer(StripDynamoHeaders(mux))
	f.srv.Config.ReadHeaderTimeout = 5 * time.Second
	f.srv.Config.ReadTimeout = o.readTimeout
	f.srv.Start()
	t.Cleanup(func() {
		f.srv.Close()
		f.gw.Close()
	})
	return f
}

// client is a real OpenAI SDK client pointed at the gateway.
func (f *fixture) client(opts ...option.RequestOption) openai.Client {
	base := []option.RequestOption{
		option.WithBaseURL(f.srv.URL + "/v1/"), option.WithAPIKey("client-key"), option.WithMaxRetries(0),
	}
	return openai.NewClient(append(base, opts...)...)
}

// post sends a raw request and returns the response with its body read.
func (f *fixture) post(path, body string, header http.Header) (*http.Response, []byte) {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(body))
	require.NoError(f.t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(f.t, err)
	return resp, b
}

func (f *fixture) get(path string, header http.Header) (*http.Response, []byte) {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	require.NoError(f.t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(f.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// chatBody is a minimal chat request.
func chatBody(model string, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"stream":%t,"messages":[{"role":"user","content":"Say hello"}]}`, model, stream)
}

// errorCode decodes an OpenAI error body's code.
func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var e errorBody
	require.NoError(t, json.Unmarshal(body, &e), string(body))
	return e.Error.Code
}

// counter reads one series of a counter vector.
func counter(t *testing.T, f *fixture, name string, labels ...string) float64 {
	t.Helper()
	g := f.metrics.Gateway
	switch name {
	case "disagg_errors":
		return testutil.ToFloat64(g.DisaggErrors.WithLabelValues(labels...))
	case "routing_path":
		return testutil.ToFloat64(g.DisaggRequests.WithLabelValues(labels...))
	case "backend":
		return testutil.ToFloat64(g.Backend.WithLabelValues(labels...))
	case "healthy":
		return testutil.ToFloat64(g.Healthy.WithLabelValues(labels...))
	case "http":
		return testutil.ToFloat64(g.Requests.WithLabelValues(labels...))
	}
	t.Fatalf("unknown metric %s", name)
	return 0
}

func newManualClock() *clock.Manual { return clock.NewManual(time.Unix(1_700_000_000, 0)) }

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		time.Sleep(10 * time.Millisecond)
	}
}

// dynamoHeaders lists the Dynamo routing headers in h, lower-cased.
func dynamoHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		if isDynamoHeader(k) {
			out[strings.ToLower(k)] = strings.Join(v, ",")
		}
	}
	return out
}

func jsonOf(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(b), &m), string(b))
	return m
}

// eventuallyCount waits for a counter to reach want: the gateway counts a
// request when its handler returns, which can be just after the client
// has read the whole answer.
func eventuallyCount(t *testing.T, f *fixture, want float64, name string, labels ...string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for counter(t, f, name, labels...) != want && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	require.Equal(t, want, counter(t, f, name, labels...), "%s %v", name, labels)
}
