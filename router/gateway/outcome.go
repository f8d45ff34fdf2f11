package gateway

import (
	"bytes"
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
	// answered 5xx, 408 or 429, or its answer broke off.
	OutcomeFailed = "failed"
	// OutcomeRefused: the frontend refused the pins (a direct-mode
	// frontend wanting a prefill pin the selection lacks).
	OutcomeRefused = "refused"
	// OutcomeRejected: the request could not be put to the frontend, or
	// the frontend answered it with a client error (a 4xx but 408 and
	// 429), which was relayed.
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
	// OutputTokens counts, for a streamed OpenAI answer, the SSE events
	// that carried generated text (one per token from Dynamo's frontend);
	// 0 for buffered answers, whose bodies are not parsed.
	OutputTokens int
	// ITL is the mean gap between those events (0 with fewer than two).
	ITL time.Duration
	// Start is the request's receipt time, End the time its pinned
	// attempt ended.
	Start, End time.Time
	// TTFT is the time from receipt to the first body byte written to
	// the client (for a buffered answer that delivered, E2E); 0 when no
	// byte was written. E2E is End minus Start.
	TTFT, E2E time.Duration
}

// firstByte notes when the first body byte went to the client and, for
// a streamed answer, counts the SSE events carrying generated text and
// when the first and last of them were written. Unwrap lets
// http.ResponseController reach the connection.
type firstByte struct {
	http.ResponseWriter
	clock clock.Clock
	at    time.Time

	stream      bool
	event       []byte // the SSE event being written, up to maxEventScan
	overflow    bool   // the event outgrew maxEventScan: not inspected
	chunks      int
	first, last time.Time
}

// maxEventScan bounds the bytes of one SSE event kept for inspection.
const maxEventScan = 64 << 10

func (f *firstByte) Write(p []byte) (int, error) {
	if len(p) > 0 && (f.at.IsZero() || f.stream) {
		now := f.clock.Now()
		if f.at.IsZero() {
			f.at = now
		}
		if f.stream {
			f.scan(p, now)
		}
	}
	return f.ResponseWriter.Write(p)
}

// scan splits written bytes into SSE events (a blank line ends one) and
// counts those whose data carries non-empty text.
func (f *firstByte) scan(p []byte, now time.Time) {
	for len(p) > 0 {
		i := bytes.Index(p, []byte("\n\n"))
		part := p
		if i >= 0 {
			part = p[:i]
		}
		if !f.overflow && len(f.event)+len(part) <= maxEventScan {
			f.event = append(f.event, part...)
		} else {
			f.overflow = true
		}
		if i < 0 {
			// An event whose "\n\n" straddles two writes: the lone "\n"
			// kept here is harmless to the text test.
			return
		}
		if !f.overflow && carriesText(f.event) {
			f.chunks++
			if f.first.IsZero() {
				f.first = now
			}
			f.last = now
		}
		f.event, f.overflow = f.event[:0], false
		p = p[i+2:]
	}
}

// carriesText reports whether an SSE event's JSON has a non-empty
// "content" (chat) or "text" (completions) string.
func carriesText(ev []byte) bool {
	for _, key := range [...][]byte{[]byte(`"content":"`), []byte(`"text":"`)} {
		if i := bytes.Index(ev, key); i >= 0 && i+len(key) < len(ev) && ev[i+len(key)] != '"' {
			return true
		}
	}
	return false
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
	if f := x.first; f != nil && f.stream {
		o.OutputTokens = f.chunks
		if f.chunks > 1 {
			o.ITL = f.last.Sub(f.first) / time.Duration(f.chunks-1)
		}
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
