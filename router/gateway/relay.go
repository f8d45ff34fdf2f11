package gateway

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"net/http"
	"sync"
	"time"

	"switchyard/router/config"
	"switchyard/router/metrics"
)

// directModeRefusal is what a Dynamo direct-mode frontend answers when a
// request to a disaggregated model carries no prefill pin (dynamo-wire §8.1).
var directModeRefusal = []byte("Prefill worker ID required in Direct routing mode")

// maxPeek is how much of an error answer is read to classify it.
const maxPeek = 64 << 10

// peekBody reads the start of an error answer; relay sends it on first.
func peekBody(a *attempt) []byte {
	b, _ := io.ReadAll(io.LimitReader(a.resp.Body, maxPeek))
	return b
}

func isDirectModeRefusal(body []byte) bool { return bytes.Contains(body, directModeRefusal) }

// relay sends an upstream answer to the client as it came: status,
// filtered headers, body (peeked bytes first). Event streams are relayed
// event by event; everything else is copied. It settles the attempt and
// returns its result.
func (x *exchange) relay(a *attempt, peek []byte) string {
	resp := a.resp
	if isClientError(resp.StatusCode) {
		return x.relayClientError(a, peek)
	}
	h := x.w.Header()
	copyResponseHeaders(h, resp.Header)
	var body io.Reader = resp.Body
	if len(peek) > 0 {
		body = io.MultiReader(bytes.NewReader(peek), resp.Body)
	}
	streaming := x.in.stream && resp.StatusCode/100 == 2 && isEventStream(resp.Header)
	if streaming {
		h.Del("Content-Length")
		x.w.WriteHeader(resp.StatusCode)
		result, v := x.relayStream(a, body)
		x.settle(a, result, v)
		return result
	}
	x.w.WriteHeader(resp.StatusCode)
	result, v := statusResult(resp.StatusCode), verdictFor(resp.StatusCode)
	if err := x.copyBody(body); err != nil {
		result, v = x.brokenResult(a, err)
	}
	x.settle(a, result, v)
	return result
}

// relayClientError answers an upstream 4xx with its status and message in
// the client's error shape: upstreams (a Dynamo frontend among them) do
// not all speak OpenAI's.
func (x *exchange) relayClientError(a *attempt, peek []byte) string {
	if peek == nil {
		peek = peekBody(a)
	}
	status := a.resp.StatusCode
	result := statusResult(status)
	x.settle(a, result, verdictFor(status))
	code, msg := upstreamError(peek, status)
	x.fail(status, code, msg)
	return result
}

func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	switch ct {
	case "text/event-stream":
		return true
	case "application/json", "":
		return false // the common answers, without parsing
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

// errClientWrite marks a failed write to the client, as opposed to a
// failed read from the backend.
type errClientWrite struct{ err error }

func (e errClientWrite) Error() string { return "writing to the client: " + e.err.Error() }

// copyBody copies a non-stream body, each write bounded by
// gateway.write_timeout so a client that stops reading is dropped.
func (x *exchange) copyBody(body io.Reader) error {
	// The loop is io.CopyBuffer's, written out so the writer (and the
	// controller it holds) stay on the stack; the pooled buffer spares
	// io.Copy's 32 KiB per response (neither side offers ReadFrom/WriteTo).
	dw := deadlineWriter{w: x.w, rc: *http.NewResponseController(x.w), d: x.writeTimeout()}
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	for {
		n, err := body.Read(*buf)
		if n > 0 {
			written, werr := dw.Write((*buf)[:n])
			if werr == nil && written != n {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				return errClientWrite{werr}
			}
		}
		switch {
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// brokenResult classifies a relay cut short after the head was sent.
func (x *exchange) brokenResult(a *attempt, err error) (string, verdict) {
	var cw errClientWrite
	switch {
	case errors.As(err, &cw) || x.r.Context().Err() != nil:
		return metrics.ResultCanceled, neutral
	case x.failed(a, err) == timedOut:
		return metrics.ResultTimeout, failure
	case endedBy(a, err, errRequestTimeout):
		return metrics.ResultCanceled, neutral
	}
	return metrics.ResultStreamError, failure
}

func (x *exchange) writeTimeout() time.Duration {
	return orDefault(x.st.cfg.Gateway.WriteTimeout.Std(), config.DefaultWriteTimeout)
}

// deadlineWriter sets a write deadline before each write. The server
// clears it after the request, so it never leaks to the next one on the
// connection.
type deadlineWriter struct {
	w   io.Writer
	rc  http.ResponseController // by value: a pointer would cost an allocation
	d   time.Duration
	err error
}

func (dw *deadlineWriter) Write(p []byte) (int, error) {
	_ = dw.rc.SetWriteDeadline(time.Now().Add(dw.d))
	n, err := dw.w.Write(p)
	if err != nil {
		dw.err = err
	}
	return n, err
}
