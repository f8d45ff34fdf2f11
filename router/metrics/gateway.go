package metrics

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Routes of the OpenAI-compatible ingress (the route label). Anything else
// is counted as RouteOther, so a scanner probing paths adds no series.
const (
	RouteChatCompletions = "chat_completions"
	RouteCompletions     = "completions"
	RouteModels          = "models"
	RouteMessages        = "messages"  // Anthropic Messages, either path
	RouteResponses       = "responses" // OpenAI Responses
	RouteOther           = "other"
)

// Routes lists every route label value.
var Routes = []string{RouteChatCompletions, RouteCompletions, RouteModels, RouteMessages, RouteResponses, RouteOther}

// statusCodes are the HTTP codes counted as themselves; any other code is
// counted as its class ("2xx", "4xx", ...), so a backend answering odd
// codes cannot grow the series count.
var statusCodes = map[int]bool{
	200: true, 400: true, 401: true, 403: true, 404: true, 405: true, 408: true, 413: true,
	415: true, 422: true, 429: true, 499: true, 500: true, 502: true, 503: true, 504: true,
}

// StatusLabel is the code label for an HTTP status.
func StatusLabel(code int) string {
	if statusCodes[code] {
		return strconv.Itoa(code)
	}
	if code >= 100 && code < 600 {
		return strconv.Itoa(code/100) + "xx"
	}
	return "other"
}

// statusLabels are the code label's values: the codes named, the classes
// and "other"; statusIndex finds a code's.
var statusLabels, statusLabelIndex = func() ([]string, map[string]int) {
	var labels []string
	for code := range statusCodes {
		labels = append(labels, strconv.Itoa(code))
	}
	slices.Sort(labels)
	labels = append(labels, "1xx", "2xx", "3xx", "4xx", "5xx", "other")
	index := make(map[string]int, len(labels))
	for i, l := range labels {
		index[l] = i
	}
	return labels, index
}()

// statusIndexOf maps the codes 0 to 599 to their label's index.
var statusIndexOf = func() (t [600]uint8) {
	for code := range t {
		t[code] = uint8(statusLabelIndex[StatusLabel(code)])
	}
	return t
}()

func statusIndex(code int) int {
	if code >= 0 && code < len(statusIndexOf) {
		return int(statusIndexOf[code])
	}
	return statusLabelIndex["other"]
}

// The sizes of the label sets, for the resolved series' arrays (a test
// holds them to the sets).
const (
	numRoutes         = 6
	numStatusLabels   = 22
	numBackendResults = 7
	numRoutingPaths   = 4
)

// Results of one upstream attempt (the result label).
const (
	ResultOK           = "ok"            // 2xx, fully relayed
	ResultClientError  = "client_error"  // 4xx
	ResultServerError  = "server_error"  // 5xx
	ResultConnectError = "connect_error" // no response: dial or transport failure
	ResultTimeout      = "timeout"       // the backend's timeout expired
	ResultCanceled     = "canceled"      // the client left or the request deadline passed
	ResultStreamError  = "stream_error"  // a stream broke after its head was relayed
)

// BackendResults lists every result label value.
var BackendResults = []string{ResultOK, ResultClientError, ResultServerError, ResultConnectError, ResultTimeout, ResultCanceled, ResultStreamError}

// Phases of a disaggregated request that can fail (the phase label).
const (
	PhaseOrchestration = "orchestration"
	PhaseDecode        = "decode"
)

// Phases lists every phase label value.
var Phases = []string{PhaseOrchestration, PhaseDecode}

// Routing paths (the routing_path label): pinned to a prefill and a decode
// worker, pinned to one worker, plain unified routing, or unified routing
// after a pinned attempt failed.
const (
	PathDisaggregated = "disaggregated"
	PathAggregated    = "aggregated"
	PathUnified       = "unified"
	PathFallback      = "fallback"
)

// RoutingPaths lists every routing_path label value.
var RoutingPaths = []string{PathDisaggregated, PathAggregated, PathUnified, PathFallback}

// Reasons the gateway refuses a request before routing it (the reason
// label of switchyard_gateway_refused_requests_total).
const (
	RefusedOverloaded   = "overloaded"    // gateway.max_in_flight requests already running
	RefusedBounds       = "bounds"        // a body past a message, part, prompt or nvext bound
	RefusedDuplicateKey = "duplicate_key" // a body naming a routing member twice
	// Refused by the builtin HTTP server before any handler (router/httpd).
	RefusedMalformed        = "malformed"         // a malformed request head (400)
	RefusedHeadTooLarge     = "head_too_large"    // a head over its byte cap (431)
	RefusedHTTPVersion      = "http_version"      // not HTTP/1.0 or 1.1 (505)
	RefusedTransferEncoding = "transfer_encoding" // a transfer coding other than chunked (501)
	RefusedExpectation      = "expectation"       // an Expect other than 100-continue (417)
)

// RefusedReasons lists every reason label value.
var RefusedReasons = []string{
	RefusedOverloaded, RefusedBounds, RefusedDuplicateKey,
	RefusedMalformed, RefusedHeadTooLarge, RefusedHTTPVersion, RefusedTransferEncoding, RefusedExpectation,
}

// Results of a backend's prompt rewrite of a chat body (the result label
// of switchyard_gateway_prompt_rewrites_total). Every result but
// rewritten sends the body as it was.
const (
	RewriteRewritten       = "rewritten"         // global prompts added or system messages merged
	RewriteNonTextSystem   = "non_text_system"   // a system message with other than text content: not merged
	RewriteUnreadable      = "unreadable"        // no messages array, or a message naming role or content twice
	RewriteTooManyMessages = "too_many_messages" // more messages than the gateway reads
)

// RewriteResults lists every result label value.
var RewriteResults = []string{RewriteRewritten, RewriteNonTextSystem, RewriteUnreadable, RewriteTooManyMessages}

// Gateway are the HTTP ingress collectors. The backend label only ever
// holds configured backend names: SetBackends installs the set, and counts
// for any other name are dropped.
type Gateway struct {
	Requests       *prometheus.CounterVec
	Duration       *prometheus.HistogramVec
	Backend        *prometheus.CounterVec
	Healthy        *prometheus.GaugeVec
	DisaggErrors   *prometheus.CounterVec
	DisaggRequests *prometheus.CounterVec
	Refused        *prometheus.CounterVec
	PromptRewrites *prometheus.CounterVec

	// The series a request touches, resolved once: a label lookup hashes
	// its values and allocates on every call.
	requests       [numRoutes][numStatusLabels]atomic.Pointer[prometheus.Counter]
	durations      [numRoutes]prometheus.Observer
	routingPaths   [numRoutingPaths]prometheus.Counter
	backendResults map[string]*[numBackendResults]prometheus.Counter // guarded by mu

	mu    sync.RWMutex
	known map[string]bool
}

// latencyBuckets span a cached short answer to a long generation.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

func newGateway() *Gateway {
	g := &Gateway{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_http_requests_total",
			Help: "Client requests to the OpenAI-compatible ingress by route and status code.",
		}, []string{"route", "code"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_http_request_duration_seconds",
			Help:    "Client request duration by route, streams until their last event.",
			Buckets: latencyBuckets,
		}, []string{"route"}),
		Backend: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_backend_requests_total",
			Help: "Upstream attempts by configured backend and result.",
		}, []string{"backend", "result"}),
		Healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_backend_healthy",
			Help: "1 while the backend's active health check passes (or is disabled).",
		}, []string{"backend"}),
		DisaggErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_disaggregated_errors_total",
			Help: "Failed pinned (shim) requests by phase: orchestration (direct-mode refusal) or decode.",
		}, []string{"phase"}),
		DisaggRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_disaggregated_requests_total",
			Help: "Routed inference requests by routing path, once per request.",
		}, []string{"routing_path"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_gateway_refused_requests_total",
			Help: "Client requests refused before routing, by reason: overloaded (503), bounds or duplicate_key (400), and, by the builtin HTTP server, malformed (400), head_too_large (431), http_version (505), transfer_encoding (501) or expectation (417).",
		}, []string{"reason"}),
		PromptRewrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_gateway_prompt_rewrites_total",
			Help: "Chat bodies a backend's global_prompts or requires_single_leading_system applied to, by result: rewritten, or sent as they were (non_text_system, unreadable, too_many_messages).",
		}, []string{"result"}),
		known:          map[string]bool{},
		backendResults: map[string]*[numBackendResults]prometheus.Counter{},
	}
	for _, r := range RewriteResults {
		g.PromptRewrites.WithLabelValues(r)
	}
	for _, r := range RefusedReasons {
		g.Refused.WithLabelValues(r)
	}
	for i, r := range Routes {
		g.durations[i] = g.Duration.WithLabelValues(r)
	}
	for _, p := range Phases {
		g.DisaggErrors.WithLabelValues(p)
	}
	for i, p := range RoutingPaths {
		g.routingPaths[i] = g.DisaggRequests.WithLabelValues(p)
	}
	return g
}

func (g *Gateway) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.Requests, g.Duration, g.Backend, g.Healthy, g.DisaggErrors, g.DisaggRequests, g.Refused, g.PromptRewrites}
}

// ObserveRequest counts one finished client request.
func (g *Gateway) ObserveRequest(route string, code int, d time.Duration) {
	ri := slices.Index(Routes, route)
	if ri < 0 {
		ri = slices.Index(Routes, RouteOther)
	}
	si := statusIndex(code)
	slot := &g.requests[ri][si]
	c := slot.Load()
	if c == nil {
		// Created on first use, so only codes answered get a series.
		counter := g.Requests.WithLabelValues(Routes[ri], statusLabels[si])
		slot.CompareAndSwap(nil, &counter)
		c = slot.Load()
	}
	(*c).Inc()
	g.durations[ri].Observe(d.Seconds())
}

// SetBackends installs the configured backend names: new ones get their
// series at zero (healthy until a probe says otherwise), removed ones lose
// theirs.
func (g *Gateway) SetBackends(names []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	next := make(map[string]bool, len(names))
	for _, n := range names {
		next[n] = true
		if !g.known[n] {
			var results [numBackendResults]prometheus.Counter
			for i, r := range BackendResults {
				results[i] = g.Backend.WithLabelValues(n, r)
			}
			g.backendResults[n] = &results
			g.Healthy.WithLabelValues(n).Set(1)
		}
	}
	for n := range g.known {
		if !next[n] {
			g.Backend.DeletePartialMatch(prometheus.Labels{"backend": n})
			g.Healthy.DeleteLabelValues(n)
			delete(g.backendResults, n)
		}
	}
	g.known = next
}

// CountBackend counts one upstream attempt.
func (g *Gateway) CountBackend(backend, result string) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if results := g.backendResults[backend]; results != nil {
		i := slices.Index(BackendResults, result)
		if i < 0 {
			i = slices.Index(BackendResults, ResultConnectError)
		}
		results[i].Inc()
	}
}

// SetHealthy exports a backend's health state.
func (g *Gateway) SetHealthy(backend string, healthy bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if !g.known[backend] {
		return
	}
	v := 0.0
	if healthy {
		v = 1
	}
	g.Healthy.WithLabelValues(backend).Set(v)
}

// CountDisaggError counts a failed pinned request.
func (g *Gateway) CountDisaggError(phase string) {
	g.DisaggErrors.WithLabelValues(closed(phase, Phases, PhaseDecode)).Inc()
}

// CountRoutingPath counts one routed request.
func (g *Gateway) CountRoutingPath(path string) {
	i := slices.Index(RoutingPaths, path)
	if i < 0 {
		i = slices.Index(RoutingPaths, PathUnified)
	}
	g.routingPaths[i].Inc()
}

// CountRefused counts a request refused before routing.
func (g *Gateway) CountRefused(reason string) {
	g.Refused.WithLabelValues(closed(reason, RefusedReasons, RefusedBounds)).Inc()
}

// CountPromptRewrite counts one chat body a backend's prompt rewrite
// applied to.
func (g *Gateway) CountPromptRewrite(result string) {
	g.PromptRewrites.WithLabelValues(closed(result, RewriteResults, RewriteUnreadable)).Inc()
}

// closed returns v when it is in the set, else fallback; it guards label
// sets against a programming error creating a series.
func closed(v string, set []string, fallback string) string {
	for _, s := range set {
		if s == v {
			return v
		}
	}
	return fallback
}
