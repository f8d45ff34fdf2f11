package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	upstreamhttp "switchyard/router/gateway/upstream"
	"switchyard/router/metrics"
	"switchyard/router/picker"
)

// outcome is how an attempt to reach a backend ended.
type outcome int

const (
	answered      outcome = iota // an HTTP response arrived
	connectFailed                // no response: dial or transport error
	timedOut                     // the backend's timeout expired first
	canceled                     // the client left or the request deadline passed
	unavailable                  // every candidate's breaker refused
	unsendable                   // the request cannot be put to this backend (x.unsent says why)
)

func (o outcome) String() string {
	switch o {
	case connectFailed:
		return "connection failed"
	case timedOut:
		return "timed out"
	case canceled:
		return "canceled"
	case unavailable:
		return "no replica available"
	case unsendable:
		return "not sendable"
	}
	return "answered"
}

// errBackendTimeout is the cause an attempt's context ends with when its
// backend's timeout fires.
var errBackendTimeout = errors.New("backend timeout")

// errRequestTimeout is the cause an attempt's context ends with when
// gateway.request_timeout passes first.
var errRequestTimeout = errors.New("request timeout")

// attempt is one upstream request.
type attempt struct {
	b     *backend
	trial bool // the breaker's half-open trial
	resp  *http.Response
	// head is the request as the builtin client sends it; it lives as
	// long as the answer's body.
	head   upstreamhttp.Head
	ctx    context.Context
	cancel context.CancelFunc
	// timer ends a stream's attempt after idle without progress; nil
	// for a buffered one, whose deadline the upstream client holds.
	timer *time.Timer
	// idle > 0 makes the timeout a gap limit: progress restarts it.
	idle    time.Duration
	settled bool
}

func (a *attempt) progress() {
	if a.idle > 0 {
		a.timer.Reset(a.idle)
	}
}

// try walks the candidates. A connection failure moves on to the next
// one within gateway.retries; an answer, a timeout or a cancellation ends
// the walk, since the request may have reached the backend. A pinned
// walk (pn set) sends pn's pins; when pn.fresh, every send after the
// first carries pins chosen anew.
func (x *exchange) try(cands []*backend, pn *pinning) (*attempt, outcome) {
	budget := 1 + max(x.st.cfg.Gateway.Retries, 0)
	last := unavailable
	for _, b := range cands {
		if budget == 0 {
			break
		}
		trial, ok := b.rt.breaker.allow(x.g.clock.Now())
		if !ok {
			continue
		}
		var sel *picker.Selection
		if pn != nil {
			if last == connectFailed && pn.fresh && !x.repin(pn) {
				// No worker to pin now: the walk ends on its last failure.
				b.rt.breaker.done(trial, neutral, x.g.clock.Now())
				break
			}
			sel = &pn.sel
		}
		budget--
		a, o := x.send(b, sel, trial)
		if o == answered {
			return a, o
		}
		if o != connectFailed {
			return nil, o
		}
		last = o
	}
	return nil, last
}

// send makes one upstream request, with the pins when sel is set.
func (x *exchange) send(b *backend, sel *picker.Selection, trial bool) (*attempt, outcome) {
	path, body := x.path, x.in.body
	if x.chat {
		body = x.rewritten(b, body)
	}
	if sel != nil && x.tokens != nil && x.st.cfg.Dynamo.KV.SendTokenData && (!x.chat || x.renderedRW.same(b.rw)) {
		// Only a pinned send goes to a shim; a fallback never carries it,
		// nor a replica whose rewrite makes a body other than the one
		// rendered (its frontend tokenizes what it gets).
		body = withTokenData(body, x.tokens)
	}
	if x.conv != nil {
		var p *problem
		if path, body, p = x.conv.outbound(b); p != nil {
			b.rt.breaker.done(trial, neutral, x.g.clock.Now())
			x.unsent = p
			return nil, unsendable
		}
		if path == pathChat {
			body = x.rewritten(b, body)
		}
	}
	a := &attempt{b: b, trial: trial}
	var end time.Time // a buffered attempt's deadline, and why it ends there
	var cause error
	if x.in.stream {
		// A gap limit: progress restarts the timer; the request's
		// deadline bounds the whole stream.
		a.idle = b.timeout()
		whole, stop := context.WithDeadlineCause(x.ctx, x.deadline, errRequestTimeout)
		var cancel context.CancelCauseFunc
		a.ctx, cancel = context.WithCancelCause(whole)
		a.timer = time.AfterFunc(a.idle, func() { cancel(errBackendTimeout) })
		a.cancel = func() { cancel(nil); stop() }
	} else {
		// A fixed deadline, the backend's or the request's, whichever
		// comes first, carried to the upstream client, which makes it
		// its connection's: no timer or context of its own to set up
		// and release per request.
		end, cause = time.Now().Add(b.timeout()), errBackendTimeout
		if x.deadline.Before(end) {
			end, cause = x.deadline, errRequestTimeout
		}
		a.ctx, a.cancel = x.ctx, noCancel
	}

	var resp *http.Response
	var err error
	if t := x.g.transport.heads(); t != nil && b.sendKey != "" {
		x.writeHead(&a.head, b, path, sel)
		resp, err = t.Send(a.ctx, b.sendKey, &a.head, body, end, cause)
	} else {
		if !end.IsZero() {
			a.ctx = upstreamhttp.WithDeadline(x.ctx, end, cause)
		}
		var req *http.Request
		if req, err = b.newRequest(a.ctx, path, x.r.URL.RawQuery, body); err != nil {
			x.settle(a, metrics.ResultConnectError, failure)
			return nil, connectFailed
		}
		h := outboundHeaders(x.r.Header)
		// The last strip, right before the only pins allowed are written.
		stripDynamo(h)
		if sel != nil {
			setPins(h, sel)
		}
		h["Content-Type"] = jsonContentType
		if x.in.stream {
			h["Accept"] = eventStreamAccept
		}
		req.Header = h
		resp, err = x.g.transport.RoundTrip(req)
	}
	if err != nil {
		o := x.failed(a, err)
		x.note.attempt(b.name, sel, 0)
		if x.g.log.Enabled(x.ctx, slog.LevelDebug) {
			x.g.log.Debug("upstream attempt failed", "backend", b.name, "outcome", o.String())
		}
		switch o {
		case canceled:
			x.settle(a, metrics.ResultCanceled, neutral)
		case timedOut:
			x.settle(a, metrics.ResultTimeout, failure)
		default:
			x.settle(a, metrics.ResultConnectError, failure)
		}
		return nil, o
	}
	a.resp = resp
	a.progress()
	x.note.attempt(b.name, sel, resp.StatusCode)
	if x.g.log.Enabled(x.ctx, slog.LevelDebug) { // the arguments cost allocations even when not logged
		x.g.log.Debug("upstream attempt answered", "backend", b.name, "status", resp.StatusCode)
	}
	return a, answered
}

// The values send sets, shared by every request (read only, and a length
// equal to the capacity, so an append copies).
var (
	jsonContentType   = []string{"application/json"}
	eventStreamAccept = []string{"text/event-stream"}
)

// failed classifies why an attempt got no (or only part of an) answer,
// err being how it failed: the deadline that ended it is the cause of
// its context (a stream's) or wrapped in err (a buffered one's).
func (x *exchange) failed(a *attempt, err error) outcome {
	switch {
	case x.ctx.Err() != nil || endedBy(a, err, errRequestTimeout):
		return canceled
	case endedBy(a, err, errBackendTimeout):
		return timedOut
	}
	return connectFailed
}

func endedBy(a *attempt, err, cause error) bool {
	return errors.Is(context.Cause(a.ctx), cause) || errors.Is(err, cause)
}

func noCancel() {}

// settle ends an attempt once: it counts the result, gives the breaker
// its verdict and releases the connection and timer.
func (x *exchange) settle(a *attempt, result string, v verdict) {
	if a.settled {
		return
	}
	a.settled = true
	x.g.metrics.CountBackend(a.b.name, result)
	a.b.rt.breaker.done(a.trial, v, x.g.clock.Now())
	if a.timer != nil {
		a.timer.Stop()
	}
	if a.resp != nil {
		_ = a.resp.Body.Close()
	}
	a.cancel()
}

// statusResult is the metrics result of an HTTP answer.
func statusResult(code int) string {
	switch {
	case code >= 500:
		return metrics.ResultServerError
	case code >= 400:
		return metrics.ResultClientError
	}
	return metrics.ResultOK
}

// verdictFor is what an answer says about the backend: a 5xx is its
// failure, anything else shows it working.
func verdictFor(code int) verdict {
	if code >= 500 {
		return failure
	}
	return success
}
