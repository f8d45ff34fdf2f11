package server

import (
	"net"
	"net/http"
	"sync"
)

// silentConns remembers the connections that have not sent a request yet.
// http.Server.Shutdown waits up to 5 s for such a connection before it
// counts as idle, so one client that connected and said nothing would hold
// every stop for 5 s; Close ends them at once instead.
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
