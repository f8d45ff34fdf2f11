package gateway

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"time"

	"switchyard/router/metrics"
)

// maxHeldEvent bounds how much of one unfinished event is held before it
// is passed on as is; events are normally a few KiB.
const maxHeldEvent = 1 << 20

// relayStream relays a server-sent event stream event by event: each
// complete event is written and flushed at once, so tokens reach the
// client as they are generated, and a broken upstream never leaves half
// an event behind the error event the gateway appends. Every event
// restarts the backend's idle timeout; each write is bounded by
// gateway.write_timeout, and a client that leaves ends the relay (and,
// through the context, the upstream request).
func (x *exchange) relayStream(a *attempt, body io.Reader) (string, verdict) {
	rc := http.NewResponseController(x.w)
	dw := &deadlineWriter{w: x.w, rc: rc, d: x.writeTimeout()}
	send := func(p []byte) error {
		if len(p) > 0 {
			if _, err := dw.Write(p); err != nil {
				return err
			}
		}
		_ = rc.SetWriteDeadline(time.Now().Add(dw.d))
		return rc.Flush()
	}
	// The head goes out now: the client sees the stream open before the
	// first token.
	if err := send(nil); err != nil {
		return metrics.ResultCanceled, neutral
	}
	br := bufio.NewReaderSize(body, 32<<10)
	var event []byte
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			a.progress()
			event = append(event, line...)
		}
		switch {
		case err == nil && isBlankLine(line):
			if send(event) != nil {
				return metrics.ResultCanceled, neutral
			}
			event = event[:0]
		case errors.Is(err, bufio.ErrBufferFull):
			if len(event) > maxHeldEvent {
				if send(event) != nil {
					return metrics.ResultCanceled, neutral
				}
				event = event[:0]
			}
		case errors.Is(err, io.EOF):
			if send(event) != nil {
				return metrics.ResultCanceled, neutral
			}
			return metrics.ResultOK, success
		case err != nil:
			result, v := x.brokenResult(a, err)
			x.streamError(send, result)
			return result, v
		}
	}
}

// streamError ends a broken stream with an OpenAI-style error event, so
// clients report a failure instead of a silently short answer. The partial
// event is dropped; nothing is written to a client that has left.
func (x *exchange) streamError(send func([]byte) error, result string) {
	var status int
	var code, msg string
	switch {
	case result == metrics.ResultCanceled && x.r.Context().Err() != nil:
		return
	case result == metrics.ResultCanceled:
		status, code, msg = http.StatusGatewayTimeout, codeRequestTimeout, "the request exceeded the gateway's time limit (gateway.request_timeout)"
	case result == metrics.ResultTimeout:
		status, code, msg = http.StatusGatewayTimeout, codeUpstreamTimeout, "the backend stopped sending events"
	default:
		status, code, msg = http.StatusBadGateway, codeStreamBroken, "the backend's stream broke off"
	}
	ev := append([]byte("data: "), errorJSON(status, code, msg)...)
	_ = send(append(ev, '\n', '\n'))
}

func isBlankLine(line []byte) bool {
	return len(line) == 1 || (len(line) == 2 && line[0] == '\r')
}
