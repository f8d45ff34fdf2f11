package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// countingServer is an httptest server that counts new connections.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func TestRequestReachesTheServerAsWritten(t *testing.T) {
	type seen struct {
		method, uri, host, body, custom string
		length                          int64
		te                              []string
	}
	got := make(chan seen, 1)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.RequestURI, r.Host, string(b), r.Header.Get("X-Custom"), r.ContentLength, r.TransferEncoding}
		w.Header().Set("X-Answer", "yes")
		_, _ = io.WriteString(w, "hello")
	})
	tr := newTestTransport(t)
	req := post(t, context.Background(), srv.URL+"/v1/chat/completions?a=1&b=%20", `{"x":1}`)
	req.Header.Set("X-Custom", "v")
	resp, body := roundTrip(t, tr, req)

	s := <-got
	require.Equal(t, http.MethodPost, s.method)
	require.Equal(t, "/v1/chat/completions?a=1&b=%20", s.uri)
	require.Equal(t, strings.TrimPrefix(srv.URL, "http://"), s.host)
	require.Equal(t, `{"x":1}`, s.body)
	require.Equal(t, int64(7), s.length)
	require.Empty(t, s.te)
	require.Equal(t, "v", s.custom)

	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "200 OK", resp.Status)
	require.Equal(t, "HTTP/1.1", resp.Proto)
	require.Equal(t, "yes", resp.Header.Get("X-Answer"))
	require.Equal(t, "5", resp.Header.Get("Content-Length"))
	require.Equal(t, int64(5), resp.ContentLength)
	require.Equal(t, "hello", body)
	require.Same(t, req, resp.Request)
}

func TestKeepAliveReusesOneConnection(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	tr := newTestTransport(t)
	for range 5 {
		_, body := roundTrip(t, tr, post(t, context.Background(), srv.URL, "x"))
		require.Equal(t, "ok", body)
	}
	require.Equal(t, int32(1), conns.Load())
	require.Equal(t, 1, tr.pool.idleCount(hostPort(post(t, context.Background(), srv.URL, ""))))
}

func TestChunkedStreamArrivesEventByEvent(t *testing.T) {
	next := make(chan struct{})
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/again" {
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			if i < 2 {
				<-next // the client has read event i
			}
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	tr := newTestTransport(t)
	resp, err := tr.RoundTrip(post(t, context.Background(), srv.URL, "{}"))
	require.NoError(t, err)
	require.Equal(t, int64(-1), resp.ContentLength)
	require.Equal(t, []string{"chunked"}, resp.TransferEncoding)
	require.Empty(t, resp.Header.Values("Transfer-Encoding"))
	buf := make([]byte, 64)
	for i := range 2 {
		n, err := resp.Body.Read(buf)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("data: %d\n\n", i), string(buf[:n]))
		next <- struct{}{}
	}
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "data: 2\n\ndata: [DONE]\n\n", string(rest))
	require.NoError(t, resp.Body.Close())

	// The stream ended cleanly: its connection carries the next request.
	_, body := roundTrip(t, tr, post(t, context.Background(), srv.URL+"/again", "{}"))
	require.Contains(t, body, "[DONE]")
	require.Equal(t, int32(1), conns.Load())
}

func TestCloseBeforeTheEndDiscardsTheConnection(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", 100<<10))
	})
	tr := newTestTransport(t)
	resp, err := tr.RoundTrip(post(t, context.Background(), srv.URL, ""))
	require.NoError(t, err)
	_, err = resp.Body.Read(make([]byte, 10))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	_, err = resp.Body.Read(make([]byte, 10))
	require.ErrorIs(t, err, http.ErrBodyReadAfterClose)
	require.Equal(t, 0, tr.pool.idleCount(hostPort(resp.Request)))

	roundTrip(t, tr, post(t, context.Background(), srv.URL, ""))
	require.Equal(t, int32(2), conns.Load())
}

func TestCancelWhileWaitingForTheHead(t *testing.T) {
	arrived := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
	})
	tr := newTestTransport(t)
	why := errors.New("the client left")
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		<-arrived
		cancel(why)
	}()
	_, err := tr.RoundTrip(post(t, ctx, srv.URL, "{}"))
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, why)
	require.Equal(t, 0, tr.pool.idleCount(hostPort(post(t, ctx, srv.URL, ""))))
}

func TestCancelMidStream(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release
	})
	tr := newTestTransport(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := tr.RoundTrip(post(t, ctx, srv.URL, "{}"))
	require.NoError(t, err)
	n, err := resp.Body.Read(make([]byte, 64))
	require.NoError(t, err)
	require.Equal(t, len("data: first\n\n"), n)
	cancel()
	_, err = resp.Body.Read(make([]byte, 64)) // blocked until the cancel wakes it
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, resp.Body.Close())
}

func TestDeadlineWrapsItsCause(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	tr := newTestTransport(t)
	backendTimeout := errors.New("backend timeout")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 1, backendTimeout) // already past
	defer cancel()
	_, err := tr.RoundTrip(post(t, ctx, srv.URL, "{}"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, backendTimeout)
}

func TestCloseFromAnotherGoroutineWakesARead(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		<-release
	})
	tr := newTestTransport(t)
	resp, err := tr.RoundTrip(post(t, context.Background(), srv.URL, "{}"))
	require.NoError(t, err)
	done := make(chan error)
	go func() {
		_, err := resp.Body.Read(make([]byte, 8))
		done <- err
	}()
	require.NoError(t, resp.Body.Close())
	require.Error(t, <-done)
}

func TestNoBodyAnswers(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			w.Header().Set("Content-Length", "42")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	tr := newTestTransport(t)
	resp, body := roundTrip(t, tr, post(t, context.Background(), srv.URL, "{}"))
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Empty(t, body)

	req, err := http.NewRequest(http.MethodHead, srv.URL, nil)
	require.NoError(t, err)
	resp, body = roundTrip(t, tr, req)
	require.Equal(t, int64(42), resp.ContentLength)
	require.Empty(t, body)
	require.Equal(t, int32(1), conns.Load())
}

func TestGetWithoutBody(t *testing.T) {
	got := make(chan *http.Request, 1)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r
		_, _ = io.WriteString(w, "healthy")
	})
	tr := newTestTransport(t)
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/health", nil)
	require.NoError(t, err)
	_, body := roundTrip(t, tr, req)
	require.Equal(t, "healthy", body)
	r := <-got
	require.Equal(t, int64(0), r.ContentLength)
	require.Empty(t, r.Header.Values("Content-Length"))
}

// recordingFallback counts the requests handed to it.
type recordingFallback struct {
	n    atomic.Int32
	next http.RoundTripper
}

func (f *recordingFallback) RoundTrip(req *http.Request) (*http.Response, error) {
	f.n.Add(1)
	return f.next.RoundTrip(req)
}

func TestWhatItDoesNotSpeakGoesToTheFallback(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "tls")
	}))
	defer tlsSrv.Close()
	plain, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	std := tlsSrv.Client().Transport.(*http.Transport)
	fb := &recordingFallback{next: std}
	tr := New(fb)
	defer tr.CloseIdleConnections()

	_, body := roundTrip(t, tr, post(t, context.Background(), tlsSrv.URL, ""))
	require.Equal(t, "tls", body)
	require.Equal(t, int32(1), fb.n.Load())

	// A body of unknown length.
	req, err := http.NewRequest(http.MethodPost, plain.URL, io.NopCloser(strings.NewReader("streamed")))
	require.NoError(t, err)
	_, body = roundTrip(t, tr, req)
	require.Equal(t, "streamed", body)
	require.Equal(t, int32(2), fb.n.Load())

	// A known length stays.
	_, body = roundTrip(t, tr, post(t, context.Background(), plain.URL, "known"))
	require.Equal(t, "known", body)
	require.Equal(t, int32(2), fb.n.Load())
}

func TestHeaderInjectionIsRefusedBeforeSending(t *testing.T) {
	arrived := make(chan bool, 4)
	rs := newRawServer(t, func(t *testing.T, n int, c net.Conn, br *bufio.Reader) {
		req, _ := readRequest(br) // nil once the client closes the connection
		arrived <- req != nil
	})
	tr := newTestTransport(t)
	req := post(t, context.Background(), rs.url(), "{}")
	req.Header.Set("X-Evil", "a\r\nInjected: yes")
	_, err := tr.RoundTrip(req)
	require.ErrorContains(t, err, `invalid value for header "X-Evil"`)
	require.False(t, <-arrived, "nothing of the request was sent")

	req = post(t, context.Background(), rs.url(), "{}")
	req.Header["Bad Name"] = []string{"v"}
	_, err = tr.RoundTrip(req)
	require.ErrorContains(t, err, "invalid header name")
	require.False(t, <-arrived)
	require.Equal(t, 2, rs.connections(), "a refusal is not retried")
}

// callbackCtx runs callbacks itself once done, as the builtin server's
// request contexts do, and counts them.
type callbackCtx struct {
	context.Context
	registered, stopped atomic.Int32
}

func (c *callbackCtx) AfterFunc(f func()) func() bool {
	c.registered.Add(1)
	stop := context.AfterFunc(c.Context, f)
	return func() bool {
		c.stopped.Add(1)
		return stop()
	}
}

// A context that runs callbacks itself takes the exchange's interrupt
// directly; the interrupt still wakes a wait for the head, and a finished
// exchange takes its callback back.
func TestCallbackContextTakesTheInterrupt(t *testing.T) {
	arrived := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			close(arrived)
			<-release
		}
	})
	tr := newTestTransport(t)

	done := &callbackCtx{Context: context.Background()}
	resp, err := tr.RoundTrip(post(t, done, srv.URL, "{}"))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, int32(1), done.registered.Load())
	require.Equal(t, int32(1), done.stopped.Load(), "released with its connection")

	inner, cancel := context.WithCancel(context.Background())
	hang := &callbackCtx{Context: inner}
	go func() {
		<-arrived
		cancel()
	}()
	_, err = tr.RoundTrip(post(t, hang, srv.URL+"/hang", "{}"))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, int32(1), hang.registered.Load())
}

// TestBodiesAroundTheWriteBuffer sends bodies smaller than, equal to and
// larger than the connection's write buffer: one that leaves in several
// writes arrives whole, on the one connection.
func TestBodiesAroundTheWriteBuffer(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = fmt.Fprintf(w, "%d", len(b))
	})
	tr := newTestTransport(t)
	for _, size := range []int{1, bufferSize - 200, bufferSize, bufferSize + 1, 3*bufferSize + 17, 4 << 20} {
		_, body := roundTrip(t, tr, post(t, context.Background(), srv.URL, strings.Repeat("z", size)))
		require.Equal(t, fmt.Sprint(size), body, "body of %d bytes", size)
	}
	require.Equal(t, int32(1), conns.Load())
}

// TestAnswerBeforeTheBodyEnds: a server that answers a long body before
// reading it all (an early 401) and then keeps the connection open. The
// answer arrives while the body is still being written; the client must
// read it once the body is out, not wait for more.
func TestAnswerBeforeTheBodyEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	const size = 8 << 20
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			served <- err
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 4\r\n\r\nnope"); err != nil {
			served <- err
			return
		}
		_, err = io.Copy(io.Discard, req.Body) // the rest of the body; the connection stays open
		served <- err
		_, _ = br.ReadByte() // until the client leaves
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, body := roundTrip(t, newTestTransport(t), post(t, ctx, "http://"+ln.Addr().String()+"/v1/chat/completions", strings.Repeat("b", size)))
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, "nope", body)
	require.NoError(t, <-served)
}
