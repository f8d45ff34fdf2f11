package upstream

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"switchyard/router/h1"
)

// writeRequest writes req's head and its body of known length to w and
// flushes. The caller has checked that req fits (see supported).
func writeRequest(w *bufio.Writer, req *http.Request, closeAfter bool) error {
	uri := req.URL.RequestURI()
	if !validRequestTarget(uri) {
		return fmt.Errorf("upstream: invalid request target %q", uri)
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !h1.ValidHeaderValue(host) {
		return errors.New("upstream: invalid Host")
	}
	w.WriteString(req.Method)
	w.WriteByte(' ')
	w.WriteString(uri)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	if n := req.ContentLength; n > 0 || n == 0 && methodExpectsBody(req.Method) {
		var digits [20]byte
		w.WriteString("Content-Length: ")
		w.Write(strconv.AppendInt(digits[:0], n, 10))
		w.WriteString("\r\n")
	}
	if closeAfter {
		w.WriteString("Connection: close\r\n")
	}
	for name, values := range req.Header {
		if skippedRequestHeader(name) {
			continue
		}
		if !h1.ValidHeaderName(name) {
			return fmt.Errorf("upstream: invalid header name %q", name)
		}
		for _, v := range values {
			if !h1.ValidHeaderValue(v) {
				return fmt.Errorf("upstream: invalid value for header %q", name)
			}
			w.WriteString(name)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
	w.WriteString("\r\n")
	if err := writeBody(w, req); err != nil {
		return err
	}
	return w.Flush()
}

// writeBody copies exactly req.ContentLength bytes of the body.
func writeBody(w *bufio.Writer, req *http.Request) error {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0 {
		return nil
	}
	var n int64
	var err error
	if wt, ok := req.Body.(io.WriterTo); ok {
		// An in-memory body (bytes.Reader, strings.Reader) copies without
		// an intermediate buffer.
		n, err = wt.WriteTo(w)
	} else {
		n, err = io.CopyN(w, req.Body, req.ContentLength)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("upstream: writing the request body: %w", err)
	}
	if n != req.ContentLength {
		return fmt.Errorf("upstream: request body is %d bytes, Content-Length says %d", n, req.ContentLength)
	}
	return nil
}

// methodExpectsBody reports whether an empty body is still announced with
// "Content-Length: 0", as net/http does.
func methodExpectsBody(m string) bool {
	return m == http.MethodPost || m == http.MethodPut || m == http.MethodPatch
}

// closeRequested reports whether req asks for the connection to end after
// its answer.
func closeRequested(req *http.Request) bool {
	return req.Close || connectionClose(req.Header)
}

// validRequestTarget rejects a target that would break the request line.
func validRequestTarget[T string | []byte](s T) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f {
			return false
		}
	}
	return true
}
