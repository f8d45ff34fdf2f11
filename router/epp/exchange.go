package epp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"switchyard/router/discovery"
	"switchyard/router/gateway"
	"switchyard/router/metrics"
	"switchyard/router/outputcount"
	"switchyard/router/picker"
)

// The GAIE endpoint-picker protocol's names.
const (
	// DestinationHeader and DestinationMetadataKey carry the chosen
	// endpoint, ip:port (a comma-separated list would be fallbacks).
	DestinationHeader = "x-gateway-destination-endpoint"
	// LBNamespace is the dynamic-metadata namespace the proxy's load
	// balancer reads the destination from.
	LBNamespace = "envoy.lb"
	// SubsetHintNamespace and SubsetHintKey: the endpoints the proxy
	// allows for this request, when it restricts them.
	SubsetHintNamespace = "envoy.lb.subset_hint"
	SubsetHintKey       = "x-gateway-destination-endpoint-subset"
	// ServedKey is where the proxy reports the endpoint that served.
	ServedKey = "x-gateway-destination-endpoint-served"
)

// Dynamo's request-mutation headers (seed 003).
const (
	HeaderWorkerID      = "x-dynamo-worker-instance-id"
	HeaderDPRank        = "x-dynamo-dp-rank"
	HeaderRoutingMode   = "x-dynamo-routing-mode"
	HeaderPrefillID     = "x-dynamo-prefill-instance-id"
	HeaderPrefillDPRank = "x-dynamo-prefill-dp-rank"
)

// maxSubsetEndpoints bounds the subset hint read from the proxy.
const maxSubsetEndpoints = 4096

// exchange is one request's stream.
type exchange struct {
	s      *Server
	st     Settings
	stream extprocv3.ExternalProcessor_ProcessServer
	ctx    context.Context

	// buffered: the request body arrives whole (BUFFERED), not in
	// FULL_DUPLEX_STREAMED chunks that must be echoed back; modeKnown once
	// the proxy has said so. streamedResponse: response body chunks are
	// to be echoed back.
	buffered, modeKnown, streamedResponse bool
	// responseBodyComes: the proxy announced it sends response bodies,
	// so the first token is the first body chunk, not the headers.
	responseBodyComes bool

	start        time.Time
	headersSeen  bool
	path         string
	remove       []string
	subset       []string
	body         []byte
	decided      bool
	answered     bool // an immediate response ended the exchange
	bodyReceived bool

	// The routed request, for the core's accounting.
	picked      bool
	req         picker.Request
	sel         picker.Selection
	destination string
	// fallbacks follow destination in the list the gateway tries in order.
	fallbacks []string
	// released: the gateway served a fallback, so the pick's bookkeeping
	// was closed then (its worker never saw the request).
	released   bool
	status     int
	firstByte  time.Time
	firstToken bool // reported to the picker
	ended      bool
	// output counts a streamed answer's output tokens while the picker
	// predicts output blocks (nil otherwise).
	output *outputcount.Counter
}

func (x *exchange) run() error {
	for {
		m, err := x.stream.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || x.ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		x.readProtocol(m.GetProtocolConfig())
		switch r := m.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			err = x.requestHeaders(m, r.RequestHeaders)
		case *extprocv3.ProcessingRequest_RequestBody:
			err = x.requestBody(r.RequestBody)
		case *extprocv3.ProcessingRequest_RequestTrailers:
			err = x.requestTrailers()
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			err = x.responseHeaders(m, r.ResponseHeaders)
		case *extprocv3.ProcessingRequest_ResponseBody:
			err = x.responseBody(r.ResponseBody)
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			x.end(OutcomeFromStatus(x.status))
			err = x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}})
		}
		if err != nil || x.answered {
			return err
		}
	}
}

// readProtocol takes the body modes the proxy announces (first message).
func (x *exchange) readProtocol(pc *extprocv3.ProtocolConfiguration) {
	if pc == nil || x.modeKnown {
		return
	}
	x.modeKnown = true
	switch pc.GetRequestBodyMode() {
	case filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_BUFFERED_PARTIAL:
		x.buffered = true
	default:
		x.buffered = false
	}
	x.streamedResponse = pc.GetResponseBodyMode() == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	x.responseBodyComes = pc.GetResponseBodyMode() != filterv3.ProcessingMode_NONE
}

// FirstTokener is a Picker that hears of a routed request's first output
// token (core.Shared): the rank that prefilled it has no prompt left to
// prefill for it.
type FirstTokener interface {
	FirstToken(requestID uint64)
}

// OutputTracker is a Picker that predicts output blocks (core.Shared):
// while TracksOutput, it hears of a streamed answer's output at block
// boundaries.
type OutputTracker interface {
	TracksOutput() bool
	Progress(requestID, outputTokens uint64)
}

// watchOutput starts counting the output of a successful event-stream
// answer whose body will reach the endpoint picker, when the picker
// predicts output blocks. A body that comes whole (not an event stream)
// reports no progress: its end follows at once.
func (x *exchange) watchOutput(h *extprocv3.HttpHeaders) {
	if !x.picked || x.ended || !x.responseBodyComes || OutcomeFromStatus(x.status) != OutcomeOK {
		return
	}
	ot, ok := x.s.opts.Picker.(OutputTracker)
	if !ok || !ot.TracksOutput() || !eventStream(h) {
		return
	}
	id := x.req.ID
	x.output = outputcount.New(x.sel.BlockSize, func(tokens uint64) { ot.Progress(id, tokens) })
}

// eventStream reports response headers naming a server-sent event stream.
func eventStream(h *extprocv3.HttpHeaders) bool {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if strings.EqualFold(hv.GetKey(), "content-type") {
			mt, _, err := mime.ParseMediaType(headerValue(hv))
			return err == nil && mt == "text/event-stream"
		}
	}
	return false
}

// reportFirstToken tells the picker, once, that the worker's answer has
// started: the first response body chunk, or the response headers when
// no body will reach the endpoint picker.
func (x *exchange) reportFirstToken() {
	if !x.picked || x.firstToken || x.ended {
		return
	}
	x.firstToken = true
	if ft, ok := x.s.opts.Picker.(FirstTokener); ok {
		ft.FirstToken(x.req.ID)
	}
}

func (x *exchange) send(r *extprocv3.ProcessingResponse) error { return x.stream.Send(r) }

func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// errOneRequest refuses a stream whose request headers come twice, or
// after its body was routed: they would route a second request and leave
// the first one's dispatch accounting open for good.
var errOneRequest = status.Error(codes.InvalidArgument,
	"an ext_proc stream carries one request: its request headers came twice or after its body")

func (x *exchange) requestHeaders(m *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	if x.headersSeen || x.decided {
		x.s.opts.Log.Warn("ext_proc stream refused", "error", errOneRequest)
		x.s.opts.Metrics.Decided(metrics.EPPProtocol, 0)
		return errOneRequest
	}
	x.headersSeen = true
	x.start = x.s.opts.Clock.Now()
	if !x.modeKnown {
		x.streamedResponse = !x.buffered
	}
	for _, hv := range h.GetHeaders().GetHeaders() {
		name := strings.ToLower(hv.GetKey())
		switch {
		case name == ":path":
			x.path = headerValue(hv)
		case gateway.IsDynamoHeader(name), strings.HasPrefix(name, DestinationHeader):
			// Only the picker steers routing: a client's own pins or
			// destination never reach the worker.
			x.remove = append(x.remove, name)
		}
	}
	x.subset = subsetHint(m.GetMetadataContext())
	if h.GetEndOfStream() {
		return x.decide(nil)
	}
	if x.buffered {
		// The proxy waits for this answer before sending the body; the
		// destination goes with the body's answer.
		return x.send(headersResponse(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: x.remove}}))
	}
	return nil
}

func (x *exchange) requestBody(b *extprocv3.HttpBody) error {
	if x.decided {
		// Chunks after a decision (none are expected) pass through.
		return x.send(bodyResponse(streamedBody(b.GetBody(), b.GetEndOfStream())))
	}
	if x.start.IsZero() {
		// A gateway that skips the request headers sends the body first:
		// the request starts with it.
		x.start = x.s.opts.Clock.Now()
	}
	if len(x.body)+len(b.GetBody()) > x.st.MaxBodyBytes {
		return x.refuse(metrics.EPPTooLarge, http.StatusRequestEntityTooLarge, "request_too_large",
			"the request body is larger than "+strconv.Itoa(x.st.MaxBodyBytes)+" bytes")
	}
	x.body = append(x.body, b.GetBody()...)
	if !b.GetEndOfStream() {
		return nil
	}
	x.bodyReceived = true
	return x.decide(x.body)
}

func (x *exchange) requestTrailers() error {
	if !x.decided {
		// The body ended with trailers rather than an end-of-stream chunk.
		x.bodyReceived = true
		if err := x.decide(x.body); err != nil || x.answered {
			return err
		}
	}
	return x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}})
}

// decide routes the request (body nil when it has none) and answers with
// the destination.
func (x *exchange) decide(body []byte) error {
	x.decided = true
	route, _, _ := strings.Cut(x.path, "?")
	chat, prompted := route == "/v1/chat/completions", route == "/v1/completions" || route == "/v1/chat/completions"
	var in gateway.OpenAIRequest
	switch {
	case body != nil && prompted:
		var perr *gateway.RequestError
		if in, perr = gateway.ParseOpenAI(body, chat, picker.Heuristic{}); perr != nil {
			return x.refuse(metrics.EPPBadRequest, perr.Status, perr.Code, perr.Message)
		}
	case body != nil:
		in = gateway.OpenAIRequest{Body: body, Model: modelOf(body)}
	}
	model := x.st.ModelName
	if model == "" {
		model = in.Model
	}
	if model == "" {
		return x.refuse(metrics.EPPBadRequest, http.StatusBadRequest, "invalid_request_error",
			"no model to route for: the body names none and no model name is configured")
	}
	if x.st.MaxInFlight > 0 && x.s.inFlight.Load() >= int64(x.st.MaxInFlight) {
		return x.refuse(metrics.EPPShed, http.StatusTooManyRequests, "overloaded",
			"the endpoint picker has "+strconv.Itoa(x.st.MaxInFlight)+" requests in flight; retry later")
	}
	req := picker.Request{ID: x.s.nextID(), Model: model, Namespaces: x.st.Namespaces, PromptTokens: in.PromptTokens,
		Now: x.start, Route: route, MaxTokens: in.MaxTokens}
	if x.st.Render && prompted && x.s.opts.Prompter != nil {
		req.Tokens, req.NoTokens = x.s.opts.Prompter.Tokens(x.ctx, model, chat, in.Body)
	}
	sel, cands, ok := x.pick(req)
	if !ok {
		return x.refuse(metrics.EPPUnavailable, http.StatusServiceUnavailable, "no_eligible_endpoint",
			"no worker can serve model "+strconv.Quote(model)+" now")
	}
	dest, ok := x.destinationOf(sel)
	if !ok {
		x.s.opts.Picker.Ended(req, sel)
		return x.refuse(metrics.EPPNoHost, http.StatusServiceUnavailable, "no_eligible_endpoint",
			"the chosen worker advertises no address")
	}
	if x.subset != nil && !contains(x.subset, dest) {
		x.s.opts.Picker.Ended(req, sel)
		return x.refuse(metrics.EPPOutOfSubset, http.StatusServiceUnavailable, "no_eligible_endpoint",
			"no eligible worker among the endpoints the gateway allows")
	}
	x.picked, x.req, x.sel, x.destination = true, req, sel, dest
	x.fallbacks = x.fallbacksFor(dest, sel, cands)
	endpoints := strings.Join(append([]string{dest}, x.fallbacks...), ",")
	x.s.inFlight.Add(1)

	out := in.Body
	if x.st.SendTokenData && prompted && len(req.Tokens) > 0 {
		out = gateway.WithTokenData(out, req.Tokens)
	}
	mutation := &extprocv3.HeaderMutation{SetHeaders: pinHeaders(endpoints, &sel), RemoveHeaders: x.remove}
	if body != nil && !bytes.Equal(out, body) {
		mutation.SetHeaders = append(mutation.SetHeaders, header("content-length", strconv.Itoa(len(out))))
	}
	meta := destinationMetadata(endpoints)
	x.s.opts.Metrics.Decided(metrics.EPPRouted, x.s.since(x.start))
	if body == nil {
		return x.send(withMetadata(headersResponse(&extprocv3.CommonResponse{HeaderMutation: mutation, ClearRouteCache: true}), meta))
	}
	if x.buffered {
		common := &extprocv3.CommonResponse{HeaderMutation: mutation, ClearRouteCache: true}
		if !bytes.Equal(out, body) {
			common.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: out}}
		}
		return x.send(withMetadata(bodyResponse(common), meta))
	}
	// Full duplex: the headers' answer (now that the destination is
	// known), then the body, in chunks the proxy forwards as they come.
	if err := x.send(withMetadata(headersResponse(&extprocv3.CommonResponse{HeaderMutation: mutation, ClearRouteCache: true}), meta)); err != nil {
		return err
	}
	for len(out) > 0 {
		n := min(len(out), maxChunk)
		if err := x.send(bodyResponse(streamedBody(out[:n], n == len(out)))); err != nil {
			return err
		}
		out = out[n:]
	}
	return nil
}

// maxChunk is the largest body chunk sent back in one message, below
// gRPC's default 4 MiB message limit with room to spare.
const maxChunk = 64 << 10

// destinationOf is the decode (or aggregated) worker's frontend sidecar:
// its host and the configured target port.
func (x *exchange) destinationOf(sel picker.Selection) (string, bool) {
	w := x.workerOf(sel.Namespace, sel.Decode.WorkerID)
	if w == nil {
		return "", false
	}
	x.checkBlockSize(w.InstanceID, int(w.BlockSize))
	return x.addressOf(w)
}

// workerOf finds a discovered worker, or nil.
func (x *exchange) workerOf(namespace string, id uint64) *discovery.Worker {
	snap := x.s.opts.Workers.Snapshot()
	if snap == nil {
		return nil
	}
	for _, w := range snap.Workers {
		if w.InstanceID == id && w.Namespace == namespace {
			return w
		}
	}
	return nil
}

// addressOf is where the gateway reaches w: its host and the target port
// (in standalone mode, the port its record names).
func (x *exchange) addressOf(w *discovery.Worker) (string, bool) {
	if w.Host == "" {
		return "", false
	}
	port := x.st.TargetPort
	if x.st.Standalone && w.Port != 0 {
		port = int(w.Port)
	}
	return net.JoinHostPort(w.Host, strconv.Itoa(port)), true
}

// pick asks the picker for the request's workers, with the candidates it
// weighed when fallback endpoints are wanted.
func (x *exchange) pick(req picker.Request) (picker.Selection, []picker.Candidate, bool) {
	if rp, ranks := x.s.opts.Picker.(RankingPicker); ranks && x.st.Fallbacks > 0 {
		return rp.PickRanked(req, nil)
	}
	sel, ok := x.s.opts.Picker.Pick(req)
	return sel, nil, ok
}

// fallbacksFor lists up to Settings.Fallbacks other endpoints for the
// gateway to try in order when dest does not answer: the next-best
// candidates of an aggregated pick by the picker's own cost, one per
// endpoint, within the gateway's subset. A disaggregated pick has none:
// its prefill pin ties it to the chosen pair.
func (x *exchange) fallbacksFor(dest string, sel picker.Selection, cands []picker.Candidate) []string {
	if x.st.Fallbacks == 0 || sel.HasPrefill {
		return nil
	}
	ranked := slices.DeleteFunc(cands, func(c picker.Candidate) bool {
		return c.Phase != "decode" || !c.Defined || c.WorkerID == sel.Decode.WorkerID
	})
	slices.SortStableFunc(ranked, func(a, b picker.Candidate) int {
		return cmp.Or(cmp.Compare(a.Cost, b.Cost), cmp.Compare(a.WorkerID, b.WorkerID), cmp.Compare(a.DPRank, b.DPRank))
	})
	var out []string
	for _, c := range ranked {
		w := x.workerOf(sel.Namespace, c.WorkerID)
		if w == nil {
			continue
		}
		d, ok := x.addressOf(w)
		if !ok || d == dest || slices.Contains(out, d) || (x.subset != nil && !contains(x.subset, d)) {
			continue
		}
		if out = append(out, d); len(out) == x.st.Fallbacks {
			break
		}
	}
	return out
}

// checkBlockSize counts a pick of a worker whose card's block size is not
// the configured one (DYN_KV_CACHE_BLOCK_SIZE).
func (x *exchange) checkBlockSize(worker uint64, cardBlockSize int) {
	if x.st.BlockSize == 0 || cardBlockSize == 0 || cardBlockSize == x.st.BlockSize {
		return
	}
	x.s.opts.Metrics.BlockSizeMismatch.Inc()
	if x.s.mismatchLogged.CompareAndSwap(false, true) {
		x.s.opts.Log.Warn("a picked worker's card names another KV block size than epp.kv_cache_block_size; its prefix overlaps are scored on its own blocks",
			"worker_id", worker, "card_block_size", cardBlockSize, "configured", x.st.BlockSize)
	}
}

// refuse ends the exchange with an immediate response.
func (x *exchange) refuse(result string, code int, errCode, msg string) error {
	x.s.opts.Metrics.Decided(result, x.s.since(x.start))
	x.answered = true
	body, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": errCode, "code": code}})
	return x.send(immediate(code, body))
}

func (x *exchange) responseHeaders(m *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	for _, hv := range h.GetHeaders().GetHeaders() {
		if hv.GetKey() == ":status" {
			x.status, _ = strconv.Atoi(headerValue(hv))
		}
	}
	if served := servedEndpoint(m.GetMetadataContext()); served != "" && x.destination != "" && served != x.destination {
		x.servedElsewhere(served)
	}
	if !x.responseBodyComes && OutcomeFromStatus(x.status) == OutcomeOK {
		x.reportFirstToken()
	}
	x.watchOutput(h)
	if h.GetEndOfStream() {
		x.end(OutcomeFromStatus(x.status))
	}
	return x.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}})
}

func (x *exchange) responseBody(b *extprocv3.HttpBody) error {
	now := x.s.opts.Clock.Now()
	if x.firstByte.IsZero() && len(b.GetBody()) > 0 {
		x.firstByte = now
		if OutcomeFromStatus(x.status) == OutcomeOK {
			x.reportFirstToken()
		}
	}
	if x.output != nil && !x.ended && !x.released {
		// Events may split across chunks: the counter carries a line's
		// state, not its bytes.
		_, _ = x.output.Write(b.GetBody())
	}
	if b.GetEndOfStream() {
		x.end(OutcomeFromStatus(x.status))
	}
	if x.streamedResponse {
		return x.send(responseBodyResponse(streamedBody(b.GetBody(), b.GetEndOfStream())))
	}
	return x.send(responseBodyResponse(&extprocv3.CommonResponse{}))
}

// end closes the request's accounting once, with how it ended.
func (x *exchange) end(status string) {
	if !x.picked || x.ended {
		return
	}
	x.ended = true
	x.s.inFlight.Add(-1)
	now := x.s.opts.Clock.Now()
	switch {
	case x.released:
	case status == OutcomeOK:
		// The worker answered in full: it is done with the request, and
		// its next sample may not come to say so.
		x.s.opts.Picker.Finished(x.req, x.sel)
	default:
		x.s.opts.Picker.Ended(x.req, x.sel)
	}
	if x.s.opts.OnOutcome != nil {
		o := Outcome{At: now, RequestID: x.req.ID, Status: status, PromptTokens: int(min(x.req.PromptTokens, 1<<31-1)), E2E: now.Sub(x.start)}
		if !x.firstByte.IsZero() {
			o.TTFT = x.firstByte.Sub(x.start)
		}
		if status != OutcomeOK {
			o.Error = "the gateway reported HTTP " + strconv.Itoa(x.status)
			if x.status == 0 {
				o.Error = "the gateway's stream ended before the response did"
			}
		}
		x.s.opts.OnOutcome(o)
	}
}

// servedElsewhere hears that the gateway served the request from another
// endpoint than the pick. A fallback of ours means the picked worker did
// not answer and never holds the request: its dispatch ends now, unserved
// (the serving worker's own load samples account for it). Any other
// endpoint is the gateway's own choice, counted and otherwise trusted.
func (x *exchange) servedElsewhere(served string) {
	if !slices.Contains(x.fallbacks, served) {
		x.s.opts.Metrics.ServedElsewhere.Inc()
		return
	}
	x.s.opts.Metrics.FallbackServed.Inc()
	if !x.released && !x.ended {
		x.released = true
		x.s.opts.Picker.Ended(x.req, x.sel)
	}
}

// finish runs when the stream closes: a request still open ended without
// a complete response.
func (x *exchange) finish(time.Time) {
	if !x.decided && !x.start.IsZero() {
		x.s.opts.Metrics.Decided(metrics.EPPAborted, 0)
	}
	if x.picked && !x.ended {
		x.end(OutcomeCancelled)
	}
}

// Outcome statuses (the recorder's vocabulary).
const (
	OutcomeOK        = "ok"
	OutcomeFailed    = "failed"
	OutcomeRejected  = "rejected"
	OutcomeCancelled = "cancelled"
)

// OutcomeFromStatus classifies a response status as the shim gateway
// classifies its upstream's: 2xx ok; 5xx, 408 and 429 failed; other 4xx
// rejected.
func OutcomeFromStatus(code int) string {
	switch {
	case code >= 200 && code < 300:
		return OutcomeOK
	case code >= 500, code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code == 0:
		return OutcomeFailed
	}
	return OutcomeRejected
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// modelOf reads the model a non-OpenAI-chat body names ("" when none).
func modelOf(body []byte) string {
	var m struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	return m.Model
}
