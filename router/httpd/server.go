package httpd

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults for the Server's zero fields.
const (
	DefaultMaxHeaderBytes = 1 << 20
	DefaultWatchAfter     = 10 * time.Millisecond
)

// Server serves HTTP/1.x on the listeners given to Serve. Its fields are
// read when Serve starts; set them before.
type Server struct {
	Handler http.Handler
	// ReadHeaderTimeout bounds reading a request's head, ReadTimeout the
	// whole request with its body, IdleTimeout the wait for the next
	// request on a kept-alive connection. Zero means no limit.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
	// MaxHeaderBytes caps a request's head (request line and headers).
	MaxHeaderBytes int
	// WatchAfter is how long a request runs before its connection is
	// watched for the client leaving (which cancels the request's
	// context). Shorter notices sooner and costs a read per request.
	WatchAfter time.Duration
	// Logger receives panics and accept errors; nil logs nothing.
	Logger *slog.Logger
	// Refused, if set, is told the reason of every request refused before
	// its handler ran (a malformed head, a head over MaxHeaderBytes, ...).
	Refused func(reason string)

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   atomic.Bool
}

// ErrServerClosed is returned by Serve after Shutdown or Close; it is
// net/http's, so callers test one error whichever server they run.
var ErrServerClosed = http.ErrServerClosed

// Serve accepts connections on ln and serves each on its own goroutine.
// It returns ErrServerClosed after Shutdown or Close.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(ln) {
		_ = ln.Close()
		return ErrServerClosed
	}
	defer s.untrack(ln)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log("accept failed; retrying", "error", err, "after", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := newConn(s, nc)
		if !s.add(c) {
			_ = nc.Close()
			return ErrServerClosed
		}
		go c.serve()
	}
}

// Shutdown stops accepting, closes connections as they go idle and waits
// for the rest to finish their requests, or for ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	s.closeListeners()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.closeIdle() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Close stops accepting and closes every connection at once.
func (s *Server) Close() error {
	s.closing.Store(true)
	s.closeListeners()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.nc.Close()
	}
	return nil
}

// OpenConns counts the connections open now, idle ones included.
func (s *Server) OpenConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) track(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
	}
	s.listeners[ln] = struct{}{}
	return true
}

func (s *Server) untrack(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.listeners, ln)
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln := range s.listeners {
		_ = ln.Close()
	}
}

func (s *Server) add(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) remove(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// closeIdle closes the connections waiting for a request (new ones that
// never sent one included) and counts those still serving one.
func (s *Server) closeIdle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			_ = c.nc.Close()
		}
	}
	return len(s.conns)
}

func (s *Server) refused(reason string) {
	if s.Refused != nil {
		s.Refused(reason)
	}
}

func (s *Server) log(msg string, args ...any) {
	if s.Logger != nil {
		s.Logger.Warn(msg, args...)
	}
}

func (s *Server) maxHeaderBytes() int {
	if s.MaxHeaderBytes > 0 {
		return s.MaxHeaderBytes
	}
	return DefaultMaxHeaderBytes
}

func (s *Server) watchAfter() time.Duration {
	if s.WatchAfter > 0 {
		return s.WatchAfter
	}
	return DefaultWatchAfter
}
