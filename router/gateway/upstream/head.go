package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"switchyard/router/h1"
)

// Head is a request its caller renders line by line, for Send: the
// gateway's inference path writes the client's forwarded headers and its
// pins straight into it, where an http.Request would cost the request, a
// header map to fill and one to walk again when writing. Its buffer is
// pooled; Send returns it. A Head must not be started again until the
// answer's body is closed: the body reader keeps the Head's deadline.
type Head struct {
	buf    []byte
	pooled *[]byte // where buf came from
	method string
	body   []byte
	err    error
	dl     deadlineContext
}

var headBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1<<10); return &b }}

// Start begins the head: the request line, whose target is its pieces
// joined (in origin form, a path from "/", as sent), and Host.
func (h *Head) Start(method, host string, target ...string) {
	if h.buf == nil {
		h.pooled = headBuffers.Get().(*[]byte)
		h.buf = (*h.pooled)[:0]
	}
	h.buf, h.err, h.method = h.buf[:0], nil, method
	h.buf = append(append(h.buf, method...), ' ')
	start := len(h.buf)
	for _, piece := range target {
		h.buf = append(h.buf, piece...)
	}
	switch {
	case !h1.ValidHeaderName(method) || method == http.MethodConnect:
		h.err = fmt.Errorf("upstream: invalid method %q", method)
	case !validRequestTarget(h.buf[start:]) || h.buf[start] != '/':
		h.err = fmt.Errorf("upstream: invalid request target %q", h1.Clip(h.buf[start:]))
	case !h1.ValidHeaderValue(host):
		h.err = errors.New("upstream: invalid Host")
	}
	h.buf = append(append(append(h.buf, " HTTP/1.1\r\nHost: "...), host...), "\r\n"...)
}

// Add writes one header line. The headers Send writes itself (framing,
// Connection, Host) are skipped; an invalid name or value fails the head.
func (h *Head) Add(name, value string) { addLine(h, name, value) }

// AddUint writes one header line whose value is v in decimal.
func (h *Head) AddUint(name string, v uint64) {
	var digits [20]byte
	addLine(h, name, strconv.AppendUint(digits[:0], v, 10))
}

func addLine[T string | []byte](h *Head, name string, value T) {
	if skippedRequestHeader(name) || h.err != nil {
		return
	}
	switch {
	case !h1.ValidHeaderName(name):
		h.err = fmt.Errorf("upstream: invalid header name %q", name)
		return
	case !h1.ValidHeaderValue(value):
		h.err = fmt.Errorf("upstream: invalid value for header %q", name)
		return
	}
	h.buf = append(append(append(append(h.buf, name...), ": "...), value...), "\r\n"...)
}

// Err is why the head cannot be sent, if it cannot.
func (h *Head) Err() error { return h.err }

// release returns the buffer to the pool.
func (h *Head) release() {
	if h.buf != nil {
		if cap(h.buf) <= 64<<10 { // an outsized head is left to the collector
			*h.pooled = h.buf[:0]
			headBuffers.Put(h.pooled)
		}
		h.buf, h.pooled = nil, nil
	}
}

// skippedRequestHeader reports the headers writeRequest and Head write
// themselves (Host, framing, Connection) or never send (Trailer: bodies
// always have a known length), in any case: a second Content-Length
// spelled otherwise would frame the request twice.
func skippedRequestHeader(name string) bool {
	for _, s := range [...]string{"Host", "Content-Length", "Transfer-Encoding", "Trailer", "Connection"} {
		if strings.EqualFold(name, s) {
			return true
		}
	}
	return false
}

// Send writes head with body to key (host:port) and reads the answer's
// head, exactly as RoundTrip does for an http.Request (pooled
// connections, the one retry of a stale one, cancellation by ctx); the
// exchange ends at deadline (zero: none) with an error that wraps
// context.DeadlineExceeded and cause. Send consumes the head's buffer.
func (t *Transport) Send(ctx context.Context, key string, h *Head, body []byte, deadline time.Time, cause error) (*http.Response, error) {
	defer h.release()
	if h.buf == nil {
		return nil, errors.New("upstream: a head sent without Start")
	}
	if h.err != nil {
		return nil, h.err
	}
	h.body = body
	var dl *deadlineContext
	if !deadline.IsZero() {
		h.dl = deadlineContext{Context: ctx, at: deadline, cause: cause}
		dl = &h.dl
	}
	return t.roundTrip(ctx, dl, key, h)
}

// writeTo writes the head, its framing and its body, and flushes. A Head
// never asks for the connection's close.
func (h *Head) writeTo(w *bufio.Writer, _ bool) error {
	w.Write(h.buf)
	if n := len(h.body); n > 0 || methodExpectsBody(h.method) {
		w.WriteString("Content-Length: ")
		w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(n), 10))
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
	w.Write(h.body)
	return w.Flush()
}

func (h *Head) requestMethod() string    { return h.method }
func (h *Head) closeAfter() bool         { return false }
func (h *Head) sent()                    {}
func (h *Head) again() (outgoing, error) { return h, nil }
func (h *Head) request() *http.Request   { return nil }
