package eventplane

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"switchyard/router/clock"
	"switchyard/router/eventplane/zmtp"
)

// Listener bounds.
const (
	// MaxListenerConns caps the publisher sessions a Listener holds at
	// once, the same budget as dialled subscriptions: a connection past it
	// is closed as soon as it is accepted.
	MaxListenerConns = MaxSubscriptions
	// MaxPublishersPerConn caps the Pods one connection may speak for. A
	// Pod's engine speaks for itself alone; only publishers on the
	// picker's own host (loopback) can name several.
	MaxPublishersPerConn = 16
)

// What a Listener did with a connection or a message, the label values of
// its counter.
const (
	ListenAccepted       = "accepted"        // a connection was taken
	ListenOverCapacity   = "over_capacity"   // a connection past MaxListenerConns, closed
	ListenHandshakeError = "handshake_error" // a connection that did not complete the ZMTP handshake
	ListenDelivered      = "delivered"       // a message handed to the sink
	ListenMalformedTopic = "malformed_topic" // a message whose first frame is not kv@<ip>[:port]@<model>
	ListenPeerMismatch   = "peer_mismatch"   // a topic naming a Pod the connection may not speak for
	ListenUnknownPod     = "unknown_pod"     // a topic naming no worker of the fleet
	ListenTooManyPods    = "too_many_pods"   // a connection naming more than MaxPublishersPerConn Pods
)

// ListenResults lists every result, for metric series.
var ListenResults = []string{ListenAccepted, ListenOverCapacity, ListenHandshakeError, ListenDelivered,
	ListenMalformedTopic, ListenPeerMismatch, ListenUnknownPod, ListenTooManyPods}

// Publisher is the worker a topic's Pod address names.
type Publisher struct {
	Namespace string
	ID        uint64
}

// ListenerConfig is what a Listener needs.
type ListenerConfig struct {
	// Addr is the host:port to bind.
	Addr string
	// Limits are the ZMTP ceilings of every session.
	Limits zmtp.Limits
	// Resolve maps a Pod address to its worker; false when no worker of
	// the fleet has it. Called for every message, concurrently.
	Resolve func(netip.Addr) (Publisher, bool)
	// Sink receives the sessions and messages, per worker.
	Sink  SessionSink
	Clock clock.Clock
	Log   *slog.Logger
	// Count is told every result (may be nil).
	Count func(result string)
	// MaxConns overrides MaxListenerConns (tests); 0 keeps it.
	MaxConns int
}

// Listener is the bound side of the KV event plane, for publishers that
// dial their subscriber (llm-d-inference-sim's --zmq-endpoint, vLLM's
// publisher in connect mode). It accepts their ZMTP sessions as a SUB
// subscribed to everything and maps each message to a worker by the Pod
// address its topic names. A worker has a session while at least one
// connection has delivered its messages and is still open.
type Listener struct {
	cfg   ListenerConfig
	ln    net.Listener
	slots chan struct{}
	wg    sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	live   map[Publisher]int // open connections that delivered for each worker
	closed bool
}

// Listen binds cfg.Addr and starts accepting. The caller owns Close.
func Listen(cfg ListenerConfig) (*Listener, error) {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = MaxListenerConns
	}
	if cfg.Count == nil {
		cfg.Count = func(string) {}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, err
	}
	l := &Listener{cfg: cfg, ln: ln, slots: make(chan struct{}, cfg.MaxConns),
		conns: map[net.Conn]struct{}{}, live: map[Publisher]int{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is the bound address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops accepting, ends every session and waits for them.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	err := l.ln.Close()
	l.wg.Wait()
	return err
}

// Conns is the number of open publisher connections.
func (l *Listener) Conns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

func (l *Listener) accept() {
	defer l.wg.Done()
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.cfg.Log.Error("kv-events listener stopped accepting", "error", err)
			}
			return
		}
		select {
		case l.slots <- struct{}{}:
		default:
			l.cfg.Count(ListenOverCapacity)
			conn.Close()
			continue
		}
		if !l.track(conn) {
			<-l.slots
			conn.Close()
			return
		}
		l.cfg.Count(ListenAccepted)
		l.wg.Add(1)
		go l.serve(conn)
	}
}

// track records an open connection so Close can end it; false once the
// listener is closed.
func (l *Listener) track(conn net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[conn] = struct{}{}
	return true
}

func (l *Listener) untrack(conn net.Conn) {
	l.mu.Lock()
	delete(l.conns, conn)
	l.mu.Unlock()
	conn.Close()
	<-l.slots
}

// serve is one publisher connection: handshake, then read until it ends.
func (l *Listener) serve(conn net.Conn) {
	defer l.wg.Done()
	defer l.untrack(conn)
	peer := remoteAddr(conn)
	sub, err := zmtp.Handshake(conn, [][]byte{{}}, l.cfg.Limits)
	if err != nil {
		l.cfg.Count(ListenHandshakeError)
		l.cfg.Log.Warn("kv-events publisher failed its handshake", "peer", peer.String(), "error", errText(err))
		return
	}
	s := &session{l: l, peer: peer, spoke: map[Publisher]bool{}, warned: map[string]bool{}}
	defer s.end()
	for {
		frames, err := sub.ReadMessage()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				l.cfg.Log.Warn("kv-events publisher session ended", "peer", peer.String(), "error", errText(err))
			}
			return
		}
		s.deliver(frames)
	}
}

// session is what one connection has spoken for.
type session struct {
	l      *Listener
	peer   netip.Addr
	spoke  map[Publisher]bool
	warned map[string]bool // results already logged for this connection
}

// deliver hands one message to the sink under the worker its topic names,
// or counts why not.
func (s *session) deliver(frames [][]byte) {
	l := s.l
	if len(frames) == 0 {
		s.refuse(ListenMalformedTopic, "")
		return
	}
	t, ok := ParseKVTopic(frames[0])
	if !ok {
		s.refuse(ListenMalformedTopic, "")
		return
	}
	if !PeerMaySpeakFor(s.peer, t.Addr) {
		s.refuse(ListenPeerMismatch, t.Addr.String())
		return
	}
	p, ok := l.cfg.Resolve(t.Addr)
	if !ok {
		s.refuse(ListenUnknownPod, t.Addr.String())
		return
	}
	if !s.spoke[p] {
		if len(s.spoke) >= MaxPublishersPerConn {
			s.refuse(ListenTooManyPods, t.Addr.String())
			return
		}
		s.spoke[p] = true
		l.connected(p)
	}
	l.cfg.Count(ListenDelivered)
	l.cfg.Sink.Deliver(p.Namespace, p.ID, frames, l.cfg.Clock.Now())
}

// refuse counts a dropped message and logs the first of each kind per
// connection.
func (s *session) refuse(result, pod string) {
	s.l.cfg.Count(result)
	if s.warned[result] {
		return
	}
	s.warned[result] = true
	s.l.cfg.Log.Warn("kv-events message dropped; further ones of this connection are only counted",
		"result", result, "peer", s.peer.String(), "pod", pod)
}

// end reports the connection's workers disconnected where it was their
// last open one.
func (s *session) end() {
	for p := range s.spoke {
		s.l.disconnected(p)
	}
}

// connected notes one more connection delivering for p; the first one
// starts p's session.
// The sink is told under l.mu, so a session's start and end reach it in
// the order the counts moved.
func (l *Listener) connected(p Publisher) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live[p]++
	if l.live[p] == 1 {
		l.cfg.Sink.Connected(p.Namespace, p.ID, l.cfg.Clock.Now())
	}
}

// disconnected ends p's session when its last connection closed.
func (l *Listener) disconnected(p Publisher) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live[p]--
	if l.live[p] > 0 {
		return
	}
	delete(l.live, p)
	l.cfg.Sink.Disconnected(p.Namespace, p.ID, l.cfg.Clock.Now())
}

// remoteAddr is the connection's peer IP (the zero Addr if it has none).
func remoteAddr(conn net.Conn) netip.Addr {
	if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		if ap := a.AddrPort(); ap.IsValid() {
			return ap.Addr().Unmap()
		}
	}
	return netip.Addr{}
}
