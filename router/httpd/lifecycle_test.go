package httpd

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A client that leaves while its request runs cancels the request's
// context, and contexts derived from it, once the watch has started.
func TestClientLeavingCancelsTheRequest(t *testing.T) {
	started := make(chan struct{})
	ended := make(chan error, 1)
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Hour)
		defer cancel()
		close(started)
		<-ctx.Done()
		ended <- r.Context().Err()
	}), func(s *Server) { s.WatchAfter = time.Millisecond })
	c, _ := raw(t, ts)
	_, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)
	within(t, started, "the handler to start")
	require.NoError(t, c.Close())
	require.ErrorIs(t, within(t, ended, "the request's context to end"), context.Canceled)
}

// A request whose client stays is not canceled by the watch, and the
// connection carries the next request after it; the context ends when
// the handler returns.
func TestWatchedRequestCompletes(t *testing.T) {
	var last context.Context
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(20 * time.Millisecond) // outlasts WatchAfter, so the watch runs
		}
		require.NoError(t, r.Context().Err())
		last = r.Context()
		_, _ = io.WriteString(w, r.URL.Path)
	}), func(s *Server) { s.WatchAfter = time.Millisecond })
	c, br := raw(t, ts)
	_, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	_, body := readResponse(t, br, http.MethodGet)
	require.Equal(t, "/slow", body)
	require.ErrorIs(t, last.Err(), context.Canceled, "ended with its handler")
	_, err = io.WriteString(c, "GET /next HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	_, body = readResponse(t, br, http.MethodGet)
	require.Equal(t, "/next", body)
}

// Shutdown closes idle connections at once and waits for a running
// request, whose answer says the connection ends.
func TestShutdownWaitsForRunningRequests(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "done")
	}))
	idle, ibr := raw(t, ts)
	_, err := io.WriteString(idle, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	readResponse(t, ibr, http.MethodGet)

	busy, bbr := raw(t, ts)
	_, err = io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	within(t, started, "the slow request to start")

	shut := make(chan error, 1)
	go func() { shut <- ts.Shutdown(context.Background()) }()
	_, err = ibr.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the idle connection is closed")
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a request running", err)
	default:
	}
	close(release)
	resp, body := readResponse(t, bbr, http.MethodGet)
	require.Equal(t, "done", body)
	require.True(t, resp.Close)
	require.NoError(t, within(t, shut, "Shutdown to return"))
}

// Shutdown gives up when its context does; Close ends what is left.
func TestShutdownHonoursItsContext(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}), func(s *Server) { s.WatchAfter = time.Millisecond })
	c, _ := raw(t, ts)
	_, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	within(t, started, "the request to start")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, ts.Shutdown(ctx), context.Canceled)
}

// A client that opens a head and stalls is cut off by ReadHeaderTimeout.
func TestStalledHeadIsCutOff(t *testing.T) {
	ts := serve(t, echo, func(s *Server) { s.ReadHeaderTimeout = 50 * time.Millisecond })
	c, br := raw(t, ts)
	_, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost:")
	require.NoError(t, err)
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF)
	require.Empty(t, ts.refused(), "a stalled client is not answered")
}

// An idle keep-alive connection is closed after IdleTimeout.
func TestIdleConnectionsTimeOut(t *testing.T) {
	ts := serve(t, echo, func(s *Server) { s.IdleTimeout = 50 * time.Millisecond })
	c, br := raw(t, ts)
	_, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	require.NoError(t, err)
	readResponse(t, br, http.MethodGet)
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF)
}

// Without an idle timeout, a kept-alive connection waits for its next
// request as long as the client likes: the last request's read deadline
// does not carry over.
func TestReadTimeoutEndsWithItsRequest(t *testing.T) {
	ts := serve(t, echo, func(s *Server) { s.ReadTimeout = 50 * time.Millisecond })
	c, br := raw(t, ts)
	for _, path := range []string{"/first", "/after-a-pause"} {
		_, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: h\r\n\r\n")
		require.NoError(t, err)
		_, body := readResponse(t, br, http.MethodGet)
		require.Equal(t, "GET "+path+"  ", body)
		time.Sleep(150 * time.Millisecond) // idle past the read timeout, the case under test
	}
}

// http.ResponseController reaches the connection through wrappers that
// Unwrap, as the gateway's do.
type wrapped struct{ http.ResponseWriter }

func (w wrapped) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func TestResponseControllerThroughWrappers(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(wrapped{w})
		require.NoError(t, rc.SetWriteDeadline(time.Now().Add(time.Minute)))
		require.NoError(t, rc.SetReadDeadline(time.Time{}))
		_, _ = io.WriteString(w, "flushed")
		require.NoError(t, rc.Flush())
		_, _, err := rc.Hijack()
		require.ErrorIs(t, err, http.ErrNotSupported)
		require.True(t, errors.Is(rc.EnableFullDuplex(), http.ErrNotSupported))
	}))
	resp, err := client(t).Get(ts.url("/"))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, "flushed", string(b))
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"))
}

// The idle timeout bounds the wait for a request, not the request: a
// body that arrives slower than IdleTimeout after a head that came whole
// is still read in full.
func TestIdleTimeoutDoesNotCutTheBody(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		_, _ = w.Write(b)
	}), func(s *Server) { s.IdleTimeout = 100 * time.Millisecond })
	c, br := raw(t, ts)
	_, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nfirst")
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond) // past the idle timeout, mid-body
	_, err = io.WriteString(c, "-last")
	require.NoError(t, err)
	resp, body := readResponse(t, br, http.MethodPost)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "first-last", body)
}

// A write deadline one answer's handler set does not reach the next
// answer on the connection, whose handler set none.
func TestWriteDeadlineEndsWithItsAnswer(t *testing.T) {
	ts := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/deadline" {
			require.NoError(t, http.NewResponseController(w).SetWriteDeadline(time.Now().Add(50*time.Millisecond)))
		}
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	c, br := raw(t, ts)
	for _, path := range []string{"/deadline", "/after-it-passed"} {
		_, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: h\r\n\r\n")
		require.NoError(t, err)
		_, body := readResponse(t, br, http.MethodGet)
		require.Equal(t, path, body)
		time.Sleep(150 * time.Millisecond) // past the first answer's deadline
	}
}

// countingConn counts the deadline changes made on it.
type countingConn struct {
	net.Conn
	changes *atomic.Int32
}

func (c countingConn) SetDeadline(t time.Time) error {
	c.changes.Add(1)
	return c.Conn.SetDeadline(t)
}

func (c countingConn) SetReadDeadline(t time.Time) error {
	c.changes.Add(1)
	return c.Conn.SetReadDeadline(t)
}

func (c countingConn) SetWriteDeadline(t time.Time) error {
	c.changes.Add(1)
	return c.Conn.SetWriteDeadline(t)
}

type countingListener struct {
	net.Listener
	changes atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, changes: &l.changes}, nil
}

// A busy kept-alive connection moves its deadlines about once a second,
// not two or three times per request: the idle wait keeps a deadline
// already late enough, a body that came whole with its head leaves it in
// place, and a handler's write deadline before each answer (the gateway
// sets one) keeps the one set when it is late enough.
func TestDeadlinesMoveRarelyOnABusyConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cl := &countingListener{Listener: ln}
	s := &Server{
		IdleTimeout: 2 * time.Minute, ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute))
			_, _ = w.Write(b)
		}),
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(cl) }()
	defer func() {
		require.NoError(t, s.Close())
		require.ErrorIs(t, <-done, ErrServerClosed)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	br := bufio.NewReader(c)
	const requests = 300
	start := time.Now()
	for i := range requests {
		body := strconv.Itoa(i)
		_, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		require.NoError(t, err)
		_, got := readResponse(t, br, http.MethodPost)
		require.Equal(t, body, got)
	}
	// A read and a write deadline to start, and about one move of each
	// per second of the run after that.
	seconds := int32(time.Since(start)/time.Second) + 1
	require.LessOrEqual(t, cl.changes.Load(), 2+2*seconds+2, "%d deadline changes for %d requests in %v",
		cl.changes.Load(), requests, time.Since(start))
}
