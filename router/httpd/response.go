package httpd

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"switchyard/router/h1"
)

// heldMax is how much of an answer is held before its head is written: an
// answer that ends within it goes out with a Content-Length, head and body
// in one write; a longer one is chunked.
const heldMax = 4 << 10

// out is the write side of one response, pooled between requests so an
// idle connection holds no write buffer.
type out struct {
	bw      *bufio.Writer
	held    []byte
	scratch [20]byte // formats numbers without allocating
}

// number writes n in base 10 or 16.
func (o *out) number(n int64, base int) {
	o.bw.Write(strconv.AppendInt(o.scratch[:0], n, base))
}

var outPool = sync.Pool{New: func() any {
	return &out{bw: bufio.NewWriterSize(nil, 8<<10), held: make([]byte, 0, heldMax)}
}}

var errFinished = errors.New("httpd: write after the handler returned")

// response is one request's exchange: its ResponseWriter, the request
// with its URL, body and context, allocated together.
type response struct {
	c       *conn
	request http.Request
	url     url.URL
	req     *http.Request // &request
	ctx     requestContext
	body    body
	out     *out

	header      http.Header
	status      int
	wroteHeader bool
	headSent    bool
	noBody      bool  // HEAD, 204, 304
	declared    int64 // the handler's Content-Length, or -1
	written     int64
	chunked     bool
	closeAfter  bool
	broken      bool  // the handler panicked
	err         error // the first failed write
	deadlineSet bool
}

// start readies w to answer the request hd describes.
func (w *response) start(hd head) {
	c := w.c
	w.header, w.declared, w.closeAfter = make(http.Header, 4), -1, hd.closeAfter
	w.ctx.parent = context.Background()
	w.body = body{w: w, chunked: hd.chunked, remaining: max(hd.length, 0), continueDue: hd.expectContinue}
	req := hd.req
	if hd.length == 0 {
		req.Body = http.NoBody
		w.body.finish()
	} else {
		req.Body = &w.body
		c.socketFree.Store(!hd.chunked && int64(c.br.Buffered()) >= hd.length)
	}
	// Setting the context in place: WithContext's copy, inlined, stays on
	// the stack, where assigning its result would put a second Request on
	// the heap.
	*req = *req.WithContext(&w.ctx)
	w.req = req
	w.out = outPool.Get().(*out)
	w.out.bw.Reset(c.nc)
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader || w.out == nil {
		return
	}
	if code < 100 || code > 999 {
		w.c.srv.log("handler wrote an invalid status code", "code", code, "path", w.req.URL.Path)
		code = http.StatusInternalServerError
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.writeInterim(code)
		return
	}
	w.wroteHeader, w.status = true, code
	w.noBody = w.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
	if cl, ok := w.header["Content-Length"]; ok {
		if n, err := h1.ParseContentLength(cl); err == nil && len(cl) == 1 {
			w.declared = n
		} else {
			delete(w.header, "Content-Length")
		}
	}
}

func (w *response) Write(p []byte) (int, error) { return w.write(p, "") }

// WriteString spares io.WriteString's copy of s.
func (w *response) WriteString(s string) (int, error) { return w.write(nil, s) }

// write takes p, or s when p is nil.
func (w *response) write(p []byte, s string) (int, error) {
	if w.out == nil {
		return 0, errFinished
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	n := len(p)
	if p == nil {
		n = len(s)
	}
	if n == 0 {
		return 0, nil
	}
	if w.noBody {
		if w.req.Method == http.MethodHead {
			return n, nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.declared >= 0 && w.written+int64(n) > w.declared {
		return 0, http.ErrContentLength
	}
	if w.err != nil {
		return 0, w.err
	}
	w.written += int64(n)
	o := w.out
	if !w.headSent {
		if len(o.held)+n <= heldMax {
			o.held = append(append(o.held, p...), s...)
			return n, nil
		}
		w.writeHead(false, p, s)
	}
	if w.chunked && w.err == nil {
		o.number(int64(n), 16)
		w.put(nil, "\r\n")
	}
	w.put(p, s)
	if w.chunked {
		w.put(nil, "\r\n")
	}
	if w.err != nil {
		return 0, w.err
	}
	return n, nil
}

// put writes p, or s when p is nil, keeping the first error.
func (w *response) put(p []byte, s string) {
	if w.err != nil {
		return
	}
	if p != nil {
		_, w.err = w.out.bw.Write(p)
	} else {
		_, w.err = w.out.bw.WriteString(s)
	}
}

// Flush sends the head and what is held, chunked unless the handler
// declared a Content-Length.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (w *response) FlushError() error {
	if w.out == nil {
		return errFinished
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.writeHead(false, nil, "")
	}
	if w.err == nil {
		w.err = w.out.bw.Flush()
	}
	return w.err
}

// SetWriteDeadline is what http.ResponseController.SetWriteDeadline calls.
// A deadline already set up to a leeway later is kept (sockio.Lenient):
// a handler that sets one before each write, as the gateway's do, moves
// it about once a second rather than per write.
func (w *response) SetWriteDeadline(t time.Time) error {
	w.deadlineSet = true
	return w.c.moveWriteDeadline(t)
}

// dropStaleWriteDeadline clears, before this answer's first write, a
// write deadline an earlier answer on the connection left, unless this
// one's handler set its own. Clearing here rather than after each answer
// saves a deadline change per request when every handler sets one (the
// gateway's do).
func (w *response) dropStaleWriteDeadline() {
	if !w.deadlineSet && !w.c.writeAt.IsZero() {
		_ = w.c.moveWriteDeadline(time.Time{})
	}
}

// SetReadDeadline is what http.ResponseController.SetReadDeadline calls:
// exactly t. It takes the watch's lock, which also sets read deadlines.
func (w *response) SetReadDeadline(t time.Time) error {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	err := w.c.nc.SetReadDeadline(t)
	w.c.readAt = t
	return err
}

// finish completes the answer after the handler returned and reports
// whether the connection can carry another request.
func (w *response) finish() bool {
	if w.broken {
		if w.headSent {
			_ = w.out.bw.Flush() // what was written, then the close tells the client
		}
		return false
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	switch {
	case !w.headSent:
		w.writeHead(true, nil, "")
	case w.chunked && w.err == nil:
		w.out.bw.WriteString("0\r\n\r\n")
	}
	if w.err == nil {
		w.err = w.out.bw.Flush()
	}
	short := !w.noBody && w.declared >= 0 && w.written < w.declared
	return w.err == nil && !short && !w.closeAfter
}

// release returns the write buffers to the pool.
func (w *response) release() {
	o := w.out
	w.out = nil
	o.bw.Reset(nil)
	o.held = o.held[:0]
	outPool.Put(o)
}

// writeHead writes the status line and headers, then what is held. final
// means the handler has returned, so the held bytes are the whole body.
func (w *response) writeHead(final bool, p []byte, s string) {
	w.headSent = true
	w.dropStaleWriteDeadline()
	w.chooseFraming(final)
	w.settleHeaders(p, s)
	w.writeHeaderLines()
	w.writeHeld()
}

// chooseFraming decides how the body is delimited: by the handler's
// Content-Length, by what is held when the handler has returned, by
// chunks (HTTP/1.1), or by closing the connection (HTTP/1.0).
func (w *response) chooseFraming(final bool) {
	switch {
	case w.noBody:
	case w.declared >= 0:
	case final:
		w.declared = int64(len(w.out.held))
	case w.req.ProtoMinor == 1:
		w.chunked = true
	default: // HTTP/1.0: the body ends when the connection does
		w.closeAfter = true
	}
}

// settleHeaders completes the handler's headers: a missing Content-Type
// is sniffed from the held bytes, or from the write (p, or s when p is
// nil) that did not fit beside them; an empty one is dropped. It also
// decides whether the connection closes after this answer.
func (w *response) settleHeaders(p []byte, s string) {
	h := w.header
	if ct, ok := h["Content-Type"]; !ok && !w.noBody && h["Content-Encoding"] == nil {
		if sniff := firstBytes(w.out.held, p, s); len(sniff) > 0 {
			h["Content-Type"] = []string{http.DetectContentType(sniff)}
		}
	} else if ok && len(ct) == 0 {
		delete(h, "Content-Type")
	}
	if w.c.srv.closing.Load() || h1.ConnectionHas(h, "close") || w.body.wontDrain() {
		w.closeAfter = true
	}
}

// writeHeaderLines writes the status line, the handler's headers (those
// the server owns skipped) and the server's own, up to the blank line.
func (w *response) writeHeaderLines() {
	o, h := w.out, w.header
	bw := o.bw
	bw.WriteString(statusLineFor(w.status, w.req.ProtoMinor))
	for name, values := range h {
		if skippedHeaders[name] || !h1.ValidHeaderName(name) {
			continue
		}
		for _, v := range values {
			bw.WriteString(name)
			bw.WriteString(": ")
			writeValue(bw, v)
			bw.WriteString("\r\n")
		}
	}
	if w.declared >= 0 && w.status != http.StatusNoContent {
		bw.WriteString("Content-Length: ")
		o.number(w.declared, 10)
		bw.WriteString("\r\n")
	}
	if w.chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if h["Date"] == nil {
		bw.WriteString("Date: ")
		bw.WriteString(httpDate(time.Now()))
		bw.WriteString("\r\n")
	}
	switch {
	case w.closeAfter:
		bw.WriteString("Connection: close\r\n")
	case w.req.ProtoMinor == 0:
		bw.WriteString("Connection: keep-alive\r\n")
	}
	bw.WriteString("\r\n")
}

// writeHeld writes the body bytes held back for the head, as a chunk
// when the body is chunked, and empties the hold.
func (w *response) writeHeld() {
	o := w.out
	if len(o.held) > 0 && !w.noBody {
		if w.chunked {
			o.number(int64(len(o.held)), 16)
			o.bw.WriteString("\r\n")
			o.bw.Write(o.held)
			o.bw.WriteString("\r\n")
		} else {
			o.bw.Write(o.held)
		}
	}
	o.held = o.held[:0]
}

// firstBytes is what the type of a body starting with held, then p (or s)
// is sniffed from.
func firstBytes(held, p []byte, s string) []byte {
	switch {
	case len(held) > 0:
		return held
	case p != nil:
		return p
	}
	return []byte(s[:min(len(s), 512)])
}

// skippedHeaders are written by writeHead itself.
var skippedHeaders = map[string]bool{"Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Trailer": true}

// writeValue writes a header value with line breaks turned to spaces, as
// net/http does, so a value built from client input cannot add a header.
func writeValue(bw *bufio.Writer, v string) {
	if h1.ValidHeaderValue(v) {
		bw.WriteString(v)
		return
	}
	bw.WriteString(strings.Map(func(r rune) rune {
		if r < ' ' && r != '\t' || r == 0x7f {
			return ' '
		}
		return r
	}, v))
}

// writeInterim sends a 1xx answer at once.
func (w *response) writeInterim(code int) {
	if w.headSent || w.err != nil {
		return
	}
	w.dropStaleWriteDeadline()
	bw := w.out.bw
	bw.WriteString(statusLineFor(code, 1))
	for name, values := range w.header {
		if !skippedHeaders[name] && h1.ValidHeaderName(name) {
			for _, v := range values {
				bw.WriteString(name)
				bw.WriteString(": ")
				writeValue(bw, v)
				bw.WriteString("\r\n")
			}
		}
	}
	bw.WriteString("\r\n")
	w.err = bw.Flush()
}

// writeContinue tells a client that waits for it to send its body.
func (w *response) writeContinue() {
	if w.headSent || w.err != nil || w.out == nil {
		return
	}
	w.dropStaleWriteDeadline()
	w.out.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	w.err = w.out.bw.Flush()
}
