package upstream

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// rawServer is a loopback TCP server whose every connection runs a
// script, for answers net/http's server would never send.
type rawServer struct {
	ln       net.Listener
	accepted chan struct{} // one value per accepted connection
	wg       sync.WaitGroup
}

// script serves one connection; n counts the server's connections from 1.
type script func(t *testing.T, n int, c net.Conn, br *bufio.Reader)

func newRawServer(t *testing.T, s script) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rs := &rawServer{ln: ln, accepted: make(chan struct{}, 64)}
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			rs.accepted <- struct{}{}
			rs.wg.Add(1)
			go func() {
				defer rs.wg.Done()
				defer c.Close()
				s(t, n, c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		rs.wg.Wait()
	})
	return rs
}

func (rs *rawServer) url() string { return "http://" + rs.ln.Addr().String() }

// connections is how many connections the server accepted so far.
func (rs *rawServer) connections() int { return len(rs.accepted) }

// readRequest reads one request and its body; nil when the client left.
func readRequest(br *bufio.Reader) (*http.Request, []byte) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, nil
	}
	body, _ := io.ReadAll(req.Body)
	return req, body
}

// answerOK writes a keep-alive 200 with body.
func answerOK(c net.Conn, body string) {
	_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "+itoa(len(body))+"\r\n\r\n"+body)
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// newTestTransport is a Transport whose fallback fails the test.
func newTestTransport(t *testing.T) *Transport {
	tr := New(failingFallback{t})
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

type failingFallback struct{ t *testing.T }

func (f failingFallback) RoundTrip(req *http.Request) (*http.Response, error) {
	f.t.Errorf("unexpected fallback for %s %s", req.Method, req.URL)
	return nil, io.EOF
}

func post(t *testing.T, ctx context.Context, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	return req
}

// roundTrip sends req and reads the whole answer.
func roundTrip(t *testing.T, tr http.RoundTripper, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp, string(b)
}
