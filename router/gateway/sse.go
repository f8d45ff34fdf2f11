package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"time"

	"switchyard/router/metrics"
)

// maxHeldEvent bounds one event as it is read, whether it comes as one
// long line or as many lines without the blank line that ends it; events
// are normally a few KiB. A stream with a longer one is ended with an
// error: passing it on would only move the unbounded buffer to the client.
const maxHeldEvent = 1 << 20

// codeEventTooLarge ends a stream whose backend sent an event past
// maxHeldEvent.
const codeEventTooLarge = "upstream_event_too_large"

// sendFunc writes bytes to the client and flushes them.
type sendFunc func([]byte) error

// streamSink is what a relayed event stream is handed to: the OpenAI
// ingress passes events through as they are, a converting ingress
// rewrites them into its own dialect.
type streamSink interface {
	// event takes one complete event, its closing blank line included.
	// part marks a fragment instead: an unfinished event at the end of
	// the stream.
	event(send sendFunc, ev []byte, part bool) error
	// end is told the upstream stream ended cleanly.
	end(send sendFunc) error
	// broken ends a stream cut off after its head with an error event.
	broken(send sendFunc, status int, code, msg string)
}

// errStreamFailed is what a sink returns when the upstream's events, not
// the connection, ended the stream badly (an error event, or no end): it
// has told the client and the attempt counts as a broken stream.
var errStreamFailed = errors.New("the upstream stream failed")

// relayStream relays a server-sent event stream as it came. A stream
// whose terminal "data: [DONE]" event reached the client is whole, however
// it ended afterwards: OpenAI SDKs hang up as soon as they read it, which
// can be before the upstream closes its end.
func (x *exchange) relayStream(a *attempt, body io.Reader) (string, verdict) {
	pt := &passthrough{}
	result, v := x.pumpStream(a, body, pt)
	if pt.done {
		return metrics.ResultOK, success
	}
	return result, v
}

// pumpStream reads a server-sent event stream event by event and hands
// each complete event to the sink, which writes and flushes at once, so
// tokens reach the client as they are generated, and a broken upstream
// never leaves half an event behind the error event the sink appends.
// Every event restarts the backend's idle timeout; each write is bounded
// by gateway.write_timeout, and a client that leaves ends the pump (and,
// through the context, the upstream request).
func (x *exchange) pumpStream(a *attempt, body io.Reader, sink streamSink) (string, verdict) {
	send := x.streamSender()
	// The head goes out now: the client sees the stream open before the
	// first token.
	if err := send(nil); err != nil {
		return metrics.ResultCanceled, neutral
	}
	br := bufio.NewReaderSize(body, 32<<10)
	var event []byte
	for {
		line, err := br.ReadSlice('\n')
		if len(event)+len(line) > maxHeldEvent {
			// Checked on every line, before it is held.
			const msg = "the backend sent an event larger than the gateway holds (1 MiB)"
			x.note.streamEnded(codeEventTooLarge, msg)
			sink.broken(send, http.StatusBadGateway, codeEventTooLarge, msg)
			return metrics.ResultStreamError, failure
		}
		if len(line) > 0 {
			a.progress()
			event = append(event, line...)
		}
		switch {
		case err == nil && isBlankLine(line):
			if err := sink.event(send, event, false); err != nil {
				return x.sinkResult(err)
			}
			event = event[:0]
		case errors.Is(err, bufio.ErrBufferFull):
			// A line longer than the read buffer: held until it ends.
		case errors.Is(err, io.EOF):
			if len(event) > 0 {
				if err := sink.event(send, event, true); err != nil {
					return x.sinkResult(err)
				}
			}
			if err := sink.end(send); err != nil {
				return x.sinkResult(err)
			}
			return metrics.ResultOK, success
		case err != nil:
			result, v := x.brokenResult(a, err)
			if status, code, msg, ok := x.streamFailure(result); ok {
				x.note.streamEnded(code, msg)
				sink.broken(send, status, code, msg)
			}
			return result, v
		}
	}
}

// streamSender writes to the client and flushes at once, each write
// bounded by gateway.write_timeout.
func (x *exchange) streamSender() sendFunc {
	dw := &deadlineWriter{w: x.w, rc: *http.NewResponseController(x.w), d: x.writeTimeout()}
	return func(p []byte) error {
		if len(p) > 0 {
			if _, err := dw.Write(p); err != nil {
				return err
			}
		}
		_ = dw.rc.SetWriteDeadline(time.Now().Add(dw.d))
		return dw.rc.Flush()
	}
}

// sinkResult classifies a sink's error, noting a failed stream for the
// request's log line.
func (x *exchange) sinkResult(err error) (string, verdict) {
	if errors.Is(err, errStreamFailed) {
		x.note.streamEnded(codeUpstreamError, "the backend's stream reported an error or ended before the answer did")
	}
	return sinkResult(err)
}

// sinkResult classifies a sink's error: its own verdict on the upstream,
// or else a failed write to the client.
func sinkResult(err error) (string, verdict) {
	if errors.Is(err, errStreamFailed) {
		return metrics.ResultStreamError, failure
	}
	return metrics.ResultCanceled, neutral
}

// streamFailure is the error a broken stream ends with, so clients report
// a failure instead of a silently short answer; ok is false when the
// client has left and nothing should be written.
func (x *exchange) streamFailure(result string) (status int, code, msg string, ok bool) {
	switch {
	case result == metrics.ResultCanceled && x.r.Context().Err() != nil:
		return 0, "", "", false
	case result == metrics.ResultCanceled:
		return http.StatusGatewayTimeout, codeRequestTimeout, "the request exceeded the gateway's time limit (gateway.request_timeout)", true
	case result == metrics.ResultTimeout:
		return http.StatusGatewayTimeout, codeUpstreamTimeout, "the backend stopped sending events", true
	}
	return http.StatusBadGateway, codeStreamBroken, "the backend's stream broke off", true
}

// passthrough relays events byte for byte and ends a broken stream with
// an OpenAI-style error event. The partial event is dropped. done is set
// once the terminal [DONE] event has been sent.
type passthrough struct{ done bool }

func (p *passthrough) event(send sendFunc, ev []byte, part bool) error {
	if err := send(ev); err != nil {
		return err
	}
	p.done = p.done || !part && isDoneEvent(ev)
	return nil
}

func (*passthrough) end(sendFunc) error { return nil }

func (p *passthrough) broken(send sendFunc, status int, code, msg string) {
	if p.done {
		return // the client has the whole answer
	}
	ev := append([]byte("data: "), errorJSON(status, code, msg)...)
	_ = send(append(ev, '\n', '\n'))
}

// isDoneEvent reports OpenAI's terminal event, "data: [DONE]".
func isDoneEvent(ev []byte) bool {
	data, ok := bytes.CutPrefix(ev, []byte("data:"))
	return ok && bytes.HasPrefix(bytes.TrimLeft(data, " "), []byte("[DONE]"))
}

func isBlankLine(line []byte) bool {
	return len(line) == 1 || (len(line) == 2 && line[0] == '\r')
}
