package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func request(t testing.TB, srv *httptest.Server) (string, []byte) {
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	return u.Host, []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Length: 2\r\n\r\n{}")
}

func TestEveryOfferedRequestIsAnswered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	addr, req := request(t, srv)

	r := run(addr, req, 1000, 4, 100*time.Millisecond, 300*time.Millisecond)
	require.Equal(t, 300, r.offered, "rate × duration, the warm-up left out")
	require.Equal(t, r.offered, r.answered)
	require.Zero(t, r.failed)
	require.Zero(t, r.non2xx)
	require.True(t, slices.IsSorted(r.latencies))
	require.Contains(t, r.String(), "offered=300 answered=300 failed=0 non2xx=0 rps=1000 ")
}

func TestRefusalsAndFailuresAreCounted(t *testing.T) {
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer busy.Close()
	addr, req := request(t, busy)
	r := run(addr, req, 1000, 2, 0, 100*time.Millisecond)
	require.Equal(t, 100, r.non2xx, "answered, but not with a 2xx")
	require.Equal(t, 100, r.answered)

	chunked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.(http.Flusher).Flush() // no Content-Length: the answer is chunked
		_, _ = io.WriteString(w, "x")
	}))
	defer chunked.Close()
	addr, req = request(t, chunked)
	r = run(addr, req, 1000, 2, 0, 100*time.Millisecond)
	require.Equal(t, 100, r.failed)
	require.Zero(t, r.answered)
	require.Contains(t, r.String(), "p99_ms=nan")
}

// FuzzExchange feeds arbitrary answers to the response reader: it returns
// an error or a status, never panics, and reads no further than the answer.
func FuzzExchange(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	f.Add([]byte("HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, answer []byte) {
		client, server := net.Pipe()
		defer client.Close()
		req := []byte("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
		go func() {
			defer server.Close()
			_, _ = io.ReadFull(server, make([]byte, len(req)))
			_, _ = server.Write(answer)
		}()
		w := worker{addr: "pipe", req: req}
		w.conn, w.br = client, newReader(client)
		status, err := w.exchange()
		if err == nil && (status < 0 || status > 999) { // three digits
			t.Fatalf("status %d from %q", status, answer)
		}
	})
}
