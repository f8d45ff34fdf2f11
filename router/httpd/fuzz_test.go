package httpd

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"switchyard/router/h1/h1test"
)

// FuzzConnection serves arbitrary client bytes: heads, bodies (by length
// or chunked) and pipelined requests. It must never panic, a handler never
// reads more body bytes than the client sent, and every request a
// handler saw got an answer.
func FuzzConnection(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}",
		"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;e=1\r\nabc\r\n0\r\nT: v\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\nabcGET /next HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nHEAD / HTTP/1.1\r\nHost: h\r\n\r\n",
		"GET http://host:80/a%20b HTTP/1.1\r\nHost: other\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
		"\r\nGET / HTTP/1.1\nHost: h\n\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var bodyBytes int64
		seen := 0
		s := &Server{WatchAfter: time.Hour, MaxHeaderBytes: 4 << 10, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			seen++
			n, _ := io.Copy(io.Discard, r.Body)
			bodyBytes += n
			w.Header().Set("X-Path", r.URL.Path)
			_, _ = io.WriteString(w, r.Method)
		})}
		nc := &h1test.Conn{R: bytes.NewReader(data)}
		c := newConn(s, nc)
		s.add(c)
		c.serve()
		if bodyBytes > int64(len(data)) {
			t.Fatalf("handlers read %d body bytes from %d bytes of input", bodyBytes, len(data))
		}
		if seen > 0 && nc.Written == 0 {
			t.Fatalf("%d requests served, nothing written", seen)
		}
		if s.OpenConns() != 0 {
			t.Fatal("the connection was not let go")
		}
	})
}
