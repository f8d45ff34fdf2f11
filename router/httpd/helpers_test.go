package httpd

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testServer runs s on a loopback listener until the test ends.
type testServer struct {
	*Server
	addr string
	mu   sync.Mutex
	refs []string // reasons given to Refused
}

func serve(t *testing.T, h http.Handler, tune ...func(*Server)) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ts := &testServer{Server: &Server{Handler: h}, addr: ln.Addr().String()}
	ts.Refused = func(reason string) {
		ts.mu.Lock()
		ts.refs = append(ts.refs, reason)
		ts.mu.Unlock()
	}
	for _, f := range tune {
		f(ts.Server)
	}
	done := make(chan error, 1)
	go func() { done <- ts.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, ts.Close())
		require.ErrorIs(t, <-done, ErrServerClosed)
		eventually(t, "every connection to end", func() bool { return ts.OpenConns() == 0 })
	})
	return ts
}

func (ts *testServer) url(path string) string { return "http://" + ts.addr + path }

func (ts *testServer) refused() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.refs...)
}

// client is a keep-alive client of its own, closed with the test.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// raw opens a plain TCP connection to the server, for bytes no HTTP
// client would send.
func raw(t *testing.T, ts *testServer) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", ts.addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	return c, bufio.NewReader(c)
}

// readResponse reads one answer from a raw connection, body included.
func readResponse(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	require.NoError(t, err)
	var b strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&b)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp, b.String()
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// within waits for ch, failing the test after a generous bound.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
