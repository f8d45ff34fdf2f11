package gateway

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"switchyard/router/metrics"
	"switchyard/router/outputcount"
	"switchyard/router/picker"
)

// exchange is one client inference request on its way through the
// gateway. It holds the configuration state it started with.
type exchange struct {
	g   *Gateway
	st  *state
	w   http.ResponseWriter
	r   *http.Request
	ctx context.Context // the client's: canceled when it leaves
	// deadline is gateway.request_timeout from the start. It is applied
	// where the request waits (each attempt's context, the render), not
	// by a context of its own: that would cost every request a timer and
	// a context derivation more.
	deadline time.Time
	key      *apiKey
	in       *inbound
	// route is the ingress route; path the upstream path (the route's
	// own for the OpenAI ingress).
	route    string
	path     string
	disclose bool
	now      time.Time
	counted  bool
	// conv, set by the Anthropic and Responses ingresses, supplies each
	// send's body and speaks the client's dialect; nil is OpenAI as is.
	conv converter
	// unsent is why the last send was unsendable (a client error).
	unsent *problem
	// first notes the first body byte written (set only with OnOutcome).
	first *firstByte
	// note gathers what the request's log line says if it fails.
	note *requestNote
	// chat: the body is a chat completions body (else completions).
	chat bool
	// tokens are the prompt's ids the router rendered (nil without),
	// sent as nvext.token_data with dynamo.kv.send_token_data.
	tokens []uint32
	// renderedRW is the prompt rewrite the rendered chat body went
	// through: only a send rewritten alike may carry the tokens.
	renderedRW *promptRewrite
	// rewrite holds the last rewritten chat body, so the render and the
	// sends (and retries) to replicas that rewrite alike build it once.
	rewrite rewriteMemo
}

// serve routes the request: pinned through a shim when the picker finds
// workers for the model in a namespace with a usable replica, unified
// otherwise.
func (x *exchange) serve() {
	st := x.st
	if st.pinning && x.g.pinner != nil {
		if ns := st.usableNamespaces(x.key, x.now); len(ns) > 0 {
			p := x.g.pinner
			req := picker.Request{
				ID: x.g.ids.Add(1), Model: st.dynamoModel(x.in.model), Namespaces: ns,
				PromptTokens: x.in.promptTokens, Now: x.now, Route: x.route, MaxTokens: x.in.maxTokens,
			}
			x.render(&req)
			if sel, ok := p.Pick(req); ok {
				x.servePinned(p, req, sel)
				return
			}
		}
	}
	x.serveUnified(false)
}

// render gives the pick the prompt's token ids while KV-aware selection
// is on. The converting ingresses pick per send on a body built later;
// their picks score without the overlap term.
func (x *exchange) render(req *picker.Request) {
	if x.g.prompter == nil || !x.st.cfg.Dynamo.KV.Enabled {
		return
	}
	if x.conv != nil {
		req.NoTokens = picker.KVRenderUnavailable
		return
	}
	body := x.in.body
	if b := x.st.renderReplica(req.Namespaces); x.chat && b != nil {
		// The body as that replica's frontend receives and tokenizes it.
		body, x.renderedRW = x.rewritten(b, body), b.rw
	}
	ctx, cancel := context.WithDeadlineCause(x.ctx, x.deadline, errRequestTimeout)
	req.Tokens, req.NoTokens = x.g.prompter.Tokens(ctx, req.Model, x.chat, body)
	cancel()
	if req.Tokens != nil {
		req.PromptTokens = uint64(len(req.Tokens))
		x.tokens = req.Tokens
	}
}

// countPath counts the request's routing path, once.
func (x *exchange) countPath(path string) {
	if !x.counted {
		x.counted = true
		x.g.metrics.CountRoutingPath(path)
	}
}

// pinning is a pinned request's current selection and the pinner that
// made it.
type pinning struct {
	p   Pinner
	req picker.Request
	sel picker.Selection
	// fresh: every send gets pins chosen anew (the converting ingresses);
	// otherwise the pins are fixed for the request.
	fresh bool
	// open: sel has not been reported to the picker as ended.
	open bool
}

// end tells the picker the current selection ended unserved, once.
func (pn *pinning) end() {
	if pn.open {
		pn.open = false
		pn.p.Ended(pn.req, pn.sel)
	}
}

// finish tells the picker the current selection was served to its end,
// once: its workers stop counting it without waiting for a load sample.
func (pn *pinning) finish() {
	if pn.open {
		pn.open = false
		pn.p.Finished(pn.req, pn.sel)
	}
}

// FirstTokener is a Pinner that hears of a pinned request's first output
// token (core.Shared): the rank that prefilled it has no prompt left to
// prefill for it.
type FirstTokener interface {
	FirstToken(requestID uint64)
}

// OutputTracker is a Pinner that predicts output blocks (core.Shared):
// while TracksOutput, it hears of a streamed request's output at block
// boundaries.
type OutputTracker interface {
	TracksOutput() bool
	Progress(requestID, outputTokens uint64)
}

// watchFirstToken reports the first token of a successful answer to the
// pinner: for a streamed answer, when the shim's first body bytes arrive;
// otherwise now, at its response headers (a buffered answer's body comes
// whole, at the end of generation). While the pinner predicts output
// blocks, a streamed answer's output tokens are counted as its bytes
// pass (whatever ingress relays or converts them: the shim answers in
// OpenAI's shape) and reported at the decode worker's block boundaries.
// A buffered answer reports no progress: its end follows at once.
func (pn *pinning) watchFirstToken(a *attempt) {
	ft, ok := pn.p.(FirstTokener)
	if !ok {
		return
	}
	id := pn.req.ID
	if !isEventStream(a.resp.Header) {
		ft.FirstToken(id)
		return
	}
	fr := &firstRead{ReadCloser: a.resp.Body, first: func() { ft.FirstToken(id) }}
	if ot, ok := pn.p.(OutputTracker); ok && ot.TracksOutput() {
		fr.count = outputcount.New(pn.sel.BlockSize, func(tokens uint64) { ot.Progress(id, tokens) })
	}
	a.resp.Body = fr
}

// firstRead calls first once, when the first bytes are read, and hands
// every byte read to count, when set.
type firstRead struct {
	io.ReadCloser
	first func()
	count *outputcount.Counter
}

func (f *firstRead) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if n > 0 && f.first != nil {
		f.first()
		f.first = nil
	}
	if n > 0 && f.count != nil {
		_, _ = f.count.Write(p[:n])
	}
	return n, err
}

// repin ends the current selection and asks the picker again, as a new
// dispatch narrowed to the same namespace (the pool being walked).
func (x *exchange) repin(pn *pinning) bool {
	pn.end()
	req := pn.req
	req.ID, req.Namespaces, req.Now = x.g.ids.Add(1), []string{pn.sel.Namespace}, x.g.clock.Now()
	sel, ok := pn.p.Pick(req)
	if ok && sel.Namespace != pn.sel.Namespace {
		pn.p.Ended(req, sel) // not offered: a bug in the picker
		ok = false
	}
	if !ok {
		return false
	}
	pn.req, pn.sel, pn.open = req, sel, true
	return true
}

// servePinned sends the request to the chosen namespace's shim pool with
// the picker's pins. For the OpenAI ingress the pins are fixed for the
// request: a connection failure moves to another replica with the same
// pins, and no failure re-runs the picker. The converting ingresses pick
// afresh for each send instead. Every outcome but success tells the
// picker the request ended unserved.
func (x *exchange) servePinned(p Pinner, req picker.Request, sel picker.Selection) {
	pn := &pinning{p: p, req: req, sel: sel, fresh: x.conv != nil, open: true}
	if x.g.onOutcome != nil {
		// Text events are counted on the OpenAI ingress's streams only;
		// the converting ingresses write other event shapes.
		x.first = &firstByte{ResponseWriter: x.w, clock: x.g.clock, stream: x.in.stream && x.conv == nil}
		x.w = x.first
	}
	pl := x.st.poolByNS[sel.Namespace]
	if pl == nil || !slices.Contains(req.Namespaces, sel.Namespace) {
		// The picker answered a namespace it was not offered (a bug in
		// it); nothing was sent, so the request may still go unified.
		pn.end()
		x.g.log.Error("picker chose a namespace it was not offered", "namespace", sel.Namespace)
		x.pinnedEnded(pn, OutcomeFailed, "the picker chose a namespace it was not offered")
		x.serveUnified(false)
		return
	}
	var buf [4]*backend // room for the usual pool, on the stack
	a, o := x.try(pl.candidates(buf[:0], x.key, x.g.clock.Now()), pn)
	// The pins of the last send decide the path. A conditional-
	// disaggregation bypass is unified: the decode worker prefills itself.
	path := metrics.PathAggregated
	switch {
	case pn.sel.Bypass:
		path = metrics.PathUnified
	case pn.sel.HasPrefill:
		path = metrics.PathDisaggregated
	}
	switch o {
	case canceled:
		pn.end()
		x.pinnedEnded(pn, OutcomeCancelled, x.canceledWhy())
		x.countPath(path)
		x.writeCanceled()
		return
	case unsendable:
		pn.end()
		x.pinnedEnded(pn, OutcomeRejected, x.unsent.message)
		x.unsent.writeAs(x)
		return
	case connectFailed, timedOut, unavailable:
		pn.end()
		msg := "the Dynamo frontend could not be reached: " + o.String()
		x.pinnedEnded(pn, OutcomeFailed, msg)
		x.decodeFailure(path, msg)
		return
	}

	status := a.resp.StatusCode
	if status/100 == 2 {
		x.discloseServer(a.b, &pn.sel)
		pn.watchFirstToken(a)
		result := x.deliver(a, nil)
		if result == metrics.ResultOK {
			pn.finish()
		} else {
			pn.end()
		}
		x.pinnedDelivered(pn, result)
		x.countPath(path)
		return
	}
	peek := peekBody(a)
	switch {
	case isDirectModeRefusal(peek):
		// The frontend wants a prefill pin this selection lacks. Another
		// pair would be refused the same way, so none is tried.
		x.settle(a, statusResult(status), neutral)
		pn.end()
		x.pinnedEnded(pn, OutcomeRefused, "the Dynamo frontend requires a prefill worker pin in direct routing mode")
		x.g.metrics.CountDisaggError(metrics.PhaseOrchestration)
		x.countPath(path)
		x.discloseServer(a.b, &pn.sel)
		x.fail(http.StatusServiceUnavailable, codePrefillDecodeUnavailable,
			"the Dynamo frontend refused the request: it requires a prefill worker pin in direct routing mode, and no prefill/decode pair is available for this model")
		return
	case isClientError(status):
		// The request's own fault: another replica, pair or fallback would
		// refuse it too, and the client must see why, not a 502 its SDK
		// retries.
		x.discloseServer(a.b, &pn.sel)
		x.deliver(a, peek)
		pn.end()
		x.pinnedEnded(pn, OutcomeRejected, "the Dynamo frontend answered HTTP "+strconv.Itoa(status)+" "+http.StatusText(status))
		x.countPath(path)
		return
	}
	x.settle(a, statusResult(status), verdictFor(status))
	pn.end()
	msg := "the Dynamo frontend answered HTTP " + strconv.Itoa(status) + " " + http.StatusText(status)
	x.pinnedEnded(pn, OutcomeFailed, msg)
	x.decodeFailure(path, msg)
}

// decodeFailure handles a failed pinned request: a unified fallback when
// configured (sent without pins), else a 502.
func (x *exchange) decodeFailure(path, msg string) {
	x.g.metrics.CountDisaggError(metrics.PhaseDecode)
	if x.st.cfg.DisaggregatedServing.FallbackToUnified {
		x.serveUnified(true)
		return
	}
	x.countPath(path)
	x.fail(http.StatusBadGateway, codeDecodeFailed, msg)
}

// serveUnified sends the request to a backend listing the model, round
// robin; as a fallback, only to backends outside the shim pools.
func (x *exchange) serveUnified(fallback bool) {
	rots, path := x.st.unified, metrics.PathUnified
	if fallback || x.st.pinning {
		// While pinning is on, the shims are direct-mode frontends: a
		// request without pins would only earn the client their 400.
		rots = x.st.fallback
	}
	if fallback {
		path = metrics.PathFallback
	}
	rot := rots[x.in.model]
	if rot == nil || !rot.allowsAny(x.key) {
		switch {
		case fallback:
			x.countPath(path)
			x.fail(http.StatusBadGateway, codeDecodeFailed,
				"the Dynamo frontend failed and no unified backend serves model "+quote(x.in.model)+" to fall back to")
		case x.dynamoServes(x.in.model):
			x.failRetryLater(codeNoBackend, "no usable Dynamo frontend replica for model "+quote(x.in.model))
		case x.shimsServe(x.in.model):
			x.failRetryLater(codeNoBackend, "no Dynamo worker can be pinned for model "+quote(x.in.model)+
				" now (the fleet view has none), and only Dynamo frontends serve it")
		default:
			x.fail(http.StatusNotFound, codeModelNotFound,
				"the model "+quote(x.in.model)+" does not exist or you do not have access to it")
		}
		return
	}
	x.countPath(path)
	var buf [4]*backend
	a, o := x.try(rot.candidates(buf[:0], x.key, x.g.clock.Now()), nil)
	switch o {
	case canceled:
		x.writeCanceled()
		return
	case unsendable:
		x.unsent.writeAs(x)
		return
	case unavailable:
		x.failRetryLater(codeNoBackend, "no healthy backend for model "+quote(x.in.model))
		return
	case connectFailed:
		x.fail(http.StatusBadGateway, codeUpstreamDown, "no backend for model "+quote(x.in.model)+" could be reached")
		return
	case timedOut:
		x.fail(http.StatusGatewayTimeout, codeUpstreamTimeout, "the backend did not answer in time")
		return
	}
	x.discloseServer(a.b, nil)
	x.deliver(a, nil)
}

// writeCanceled answers a request whose context ended: nothing when the
// client left, a 504 when gateway.request_timeout passed.
func (x *exchange) writeCanceled() {
	if x.r.Context().Err() != nil {
		return
	}
	x.fail(http.StatusGatewayTimeout, codeRequestTimeout, "the request exceeded the gateway's time limit (gateway.request_timeout)")
}

func (x *exchange) discloseServer(b *backend, sel *picker.Selection) {
	if x.disclose {
		disclose(x.w.Header(), b.name, sel)
	}
}

// dynamoServes reports whether a routable worker in a pool the key may
// use serves the model: a model that exists but cannot be reached now is
// a 503, not a 404.
func (x *exchange) dynamoServes(model string) bool {
	if !x.st.pinning {
		return false
	}
	want := x.st.dynamoModel(model)
	for _, w := range x.g.snapshot().Workers {
		if w.Model == want && routable(w) {
			if pl := x.st.poolByNS[w.Namespace]; pl != nil && pl.allowsAny(x.key) {
				return true
			}
		}
	}
	return false
}

// shimsServe reports whether a shim pool's backend the key may use lists
// the model: the model exists, but only behind direct-mode frontends.
func (x *exchange) shimsServe(model string) bool {
	rot := x.st.unified[model]
	return x.st.pinning && rot != nil && rot.allowsAny(x.key)
}

// retryAfterSeconds is the pause a 503 asks for: the fleet view or a
// backend's health may return any moment, and SDKs honour the header.
const retryAfterSeconds = "2"

// failRetryLater answers 503 with Retry-After: nothing can serve the
// request now, but something may soon.
func (x *exchange) failRetryLater(code, msg string) {
	x.w.Header().Set("Retry-After", retryAfterSeconds)
	x.fail(http.StatusServiceUnavailable, code, msg)
}

// isClientError reports an upstream 4xx that says the request is wrong:
// any but 408 and 429, which say the upstream is slow or busy.
func isClientError(status int) bool {
	return status/100 == 4 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
}

// quote renders a client-supplied name for an error message: escaped,
// and cut short so a huge model field does not come back whole.
func quote(s string) string {
	const limit = 256
	if len(s) > limit {
		s = s[:limit] + "..."
	}
	return strconv.Quote(s)
}
