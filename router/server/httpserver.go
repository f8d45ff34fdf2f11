package server

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/config"
	"switchyard/router/httpd"
)

// httpServer is what Server needs of an HTTP server: net/http's and
// router/httpd's both have it.
type httpServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// Bounds on what a slow or idle client can hold, whichever server runs.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 1 << 20
)

// newHTTPServer bounds what a slow or idle client can hold. Headers and
// bodies have read deadlines, lifted once a body is read, so streams are
// not cut by them. There is no server-wide write timeout: it would cut
// long streams; the gateway bounds each write instead. The read timeout
// and the server choice apply from the next restart.
func (s *Server) newHTTPServer(h http.Handler, g config.Gateway) httpServer {
	if g.Server == config.ServerNetHTTP {
		return newNetHTTPServer(h, g)
	}
	srv := &httpd.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       g.ReadTimeout.Std(),
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		Logger:            s.log,
		Refused:           s.metrics.Gateway.CountRefused,
	}
	s.metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_http_open_connections",
		Help: "Client connections open to the builtin HTTP server, idle keep-alive ones included.",
	}, func() float64 { return float64(srv.OpenConns()) }))
	return srv
}

// netHTTPServer is net/http's server with the connections that never
// sent a request closed at Shutdown: net/http waits up to 5 s for such a
// connection before it counts as idle, so one client that connected and
// said nothing would hold every stop for 5 s.
type netHTTPServer struct {
	*http.Server
	silent silentConns
}

func newNetHTTPServer(h http.Handler, g config.Gateway) *netHTTPServer {
	s := &netHTTPServer{Server: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       g.ReadTimeout.Std(),
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}}
	s.ConnState = s.silent.track
	s.RegisterOnShutdown(s.silent.closeAll)
	return s
}

// silentConns remembers the connections that have not sent a request yet,
// for netHTTPServer's Shutdown to close.
type silentConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// track is the http.Server's ConnState hook.
func (s *silentConns) track(c net.Conn, state http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if state == http.StateNew {
		if s.conns == nil {
			s.conns = make(map[net.Conn]struct{})
		}
		s.conns[c] = struct{}{}
		return
	}
	delete(s.conns, c)
}

// closeAll closes the connections that are still silent. Called after
// Shutdown has closed the listeners, so no new ones arrive.
func (s *silentConns) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
	clear(s.conns)
}
