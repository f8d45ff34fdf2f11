package upstream

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"switchyard/router/h1/h1test"
)

// FuzzResponse feeds arbitrary bytes to the answer path: head, framing
// and body. It must never panic, and a body never yields more bytes than
// the input held.
func FuzzResponse(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nclose-delimited",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
		"HTTP/1.1 200 OK\nx-lower: v\n\nbare LF",
		"HTTP/1.1 999 \r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := New(http.DefaultTransport)
		c := newConn(&h1test.Conn{R: bytes.NewReader(data)}, "fuzz:80")
		req, err := http.NewRequest(http.MethodPost, "http://fuzz/", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.exchange(context.Background(), nil, c, (*stdRequest)(req), time.Now())
		if err != nil {
			return
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		if n > int64(len(data)) {
			t.Fatalf("body of %d bytes from %d bytes of input", n, len(data))
		}
		_ = resp.Body.Close()
		tr.CloseIdleConnections()
	})
}

// FuzzHead checks that whatever a Head accepts is read back as one
// request carrying exactly the target, header and body it was given:
// nothing a caller passes can end the head early or add a header.
func FuzzHead(f *testing.F) {
	f.Add("/v1/chat/completions", "X-Trace", "abc", "{}")
	f.Add("/p?q=1", "X-A", "1\r\nX-Injected: 2", "")
	f.Add("/p", "Content-Length", "5", "body")
	f.Add("/p q", "X A", "\x00", "x")
	f.Fuzz(func(t *testing.T, target, name, value, body string) {
		var h Head
		h.Start(http.MethodPost, "backend:80", target)
		h.Add(name, value)
		if h.Err() != nil {
			h.release()
			return
		}
		if _, err := url.ParseRequestURI(target); err != nil {
			// Sent as the client wrote it (a bad escape, say), which Go's
			// reader below refuses; framing is what this target checks.
			h.release()
			return
		}
		h.body = []byte(body)
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		if err := h.writeTo(w, false); err != nil {
			t.Fatal(err)
		}
		h.release()
		br := bufio.NewReader(&out)
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("written head does not parse: %v\n%q", err, out.String())
		}
		got, err := io.ReadAll(req.Body)
		if err != nil || string(got) != body {
			t.Fatalf("body %q (%v), want %q", got, err, body)
		}
		if br.Buffered() != 0 {
			t.Fatalf("%d bytes after the request", br.Buffered())
		}
		if req.RequestURI != target {
			t.Fatalf("target %q, want %q", req.RequestURI, target)
		}
		if skippedRequestHeader(name) {
			return
		}
		want := strings.Trim(value, " \t") // a reader trims the value's surrounding blanks
		if vs := req.Header.Values(name); len(vs) != 1 || vs[0] != want {
			t.Fatalf("header %q = %q, want [%q]", name, vs, want)
		}
	})
}
