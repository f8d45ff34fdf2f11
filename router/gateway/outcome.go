package gateway

import (
	"net/http"
	"time"

	"switchyard/router/clock"
	"switchyard/router/metrics"
)

// Outcome statuses (the recorder's vocabulary).
const (
	// OutcomeOK: the answer reached the client whole.
	OutcomeOK = "ok"
	// OutcomeFailed: the frontend could not be reached or timed out,
	// answered 5xx (or 408, 429, or any error to a buffered request), or
	// its answer broke off.
	OutcomeFailed = "failed"
	// OutcomeRefused: the frontend refused the pins (a direct-mode
	// frontend wanting a prefill pin the selection lacks).
	OutcomeRefused = "refused"
	// OutcomeRejected: the request could not be put to the frontend, or
	// a streaming request's client error was relayed as sent.
	OutcomeRejected = "rejected"
	// OutcomeCancelled: the client left, or gateway.request_timeout
	// passed.
	OutcomeCancelled = "cancelled"
)

// Outcome is how a pinned request ended, reported once per request when
// its pinned attempt ends (a unified fallback afterwards is not part of
// it).
type Outcome struct {
	// RequestID is the picker request id of the request's last selection
	// (the converting ingresses pick anew for each send).
	RequestID uint64
	Route     string
	// Status is one of the Outcome* constants; Error says why when it is
	// not OutcomeOK.
	Status       string
	Error        string
	PromptTokens uint64
	// OutputTokens is 0: the relayed answers are not parsed.
	OutputTokens int
	// Start is the request's receipt time, End the time its pinned
	// attempt ended.
	Start, End time.Time
	// TTFT is the time from receipt to the first body byte written to
	// the client (for a buffered answer that delivered, E2E); 0 when no
	// byte was written. E2E is End minus Start.
	TTFT, E2E time.Duration
}

// firstByte notes when the first body byte went to the client. Unwrap
// lets http.ResponseController reach the connection.
type firstByte struct {
	http.ResponseWriter
	clock clock.Clock
	at    time.Time
}

func (f *firstByte) Write(p []byte) (int, error) {
	if f.at.IsZero() && len(p) > 0 {
		f.at = f.clock.Now()
	}
	return f.ResponseWriter.Write(p)
}

func (f *firstByte) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// pinnedEnded reports the pinned attempt's outcome, when asked to.
func (x *exchange) pinnedEnded(pn *pinning, status, why string) {
	if x.g.onOutcome == nil {
		return
	}
	end := x.g.clock.Now()
	o := Outcome{RequestID: pn.req.ID, Route: x.route, Status: status, Error: why, PromptTokens: x.in.promptTokens,
		Start: x.now, End: end, E2E: end.Sub(x.now)}
	switch {
	case status == OutcomeOK && !x.in.stream:
		o.TTFT = o.E2E
	case x.first != nil && !x.first.at.IsZero():
		o.TTFT = x.first.at.Sub(x.now)
	}
	x.g.onOutcome(o)
}

// pinnedDelivered reports a delivered answer by its relay result.
func (x *exchange) pinnedDelivered(pn *pinning, result string) {
	switch result {
	case metrics.ResultOK:
		x.pinnedEnded(pn, OutcomeOK, "")
	case metrics.ResultCanceled:
		x.pinnedEnded(pn, OutcomeCancelled, x.canceledWhy())
	default:
		x.pinnedEnded(pn, OutcomeFailed, "the answer broke off: "+result)
	}
}

// canceledWhy tells a client that left from the request deadline.
func (x *exchange) canceledWhy() string {
	if x.r.Context().Err() != nil {
		return "the client left"
	}
	return "the request exceeded gateway.request_timeout"
}
