//go:build linux

package eventplane_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard/fakefleet/wire"
	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
)

// scriptedPublisher accepts subscriptions and hands each connection to the
// test after writing the PUB side of the handshake; what the subscriber
// writes (its handshake, PONGs) is collected per connection.
type scriptedPublisher struct {
	addr  string
	conns chan *pubConn
}

type pubConn struct {
	net.Conn
	mu   sync.Mutex
	got  []byte
	done chan struct{} // closed when the subscriber's side closed
}

func (c *pubConn) received() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.got)
}

func newScriptedPublisher(t *testing.T) *scriptedPublisher {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p := &scriptedPublisher{addr: l.Addr().String(), conns: make(chan *pubConn, 16)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			pc := &pubConn{Conn: c, done: make(chan struct{})}
			c.Write(publisherGreeting())
			go func() {
				defer close(pc.done)
				buf := make([]byte, 512)
				for {
					n, err := c.Read(buf)
					pc.mu.Lock()
					pc.got = append(pc.got, buf[:n]...)
					pc.mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
			p.conns <- pc
		}
	}()
	return p
}

func (p *scriptedPublisher) next(t *testing.T) *pubConn {
	t.Helper()
	select {
	case c := <-p.conns:
		return c
	case <-time.After(15 * time.Second):
		t.Fatal("no subscription connected")
	}
	return nil
}

// loadMessages encodes kv_metrics messages first..last as ZMTP frames.
func loadMessages(pid, first, last uint64) []byte {
	var b []byte
	for seq := first; seq <= last; seq++ {
		frames := wire.LoadMessage(pid, seq, wire.ActiveLoad{WorkerID: 1, KVUsedBlocks: wire.U64(seq)}, time.Unix(0, 0))
		for i, f := range frames {
			b = zmtpFrame(b, f, i < len(frames)-1)
		}
	}
	return b
}

// sessionLog is a SessionSink that records every call in order. calls is
// deliberately unguarded, as a sink's own state may be: the race detector
// fails the test if a parked session's hand-over to another goroutine
// does not order the calls.
type sessionLog struct {
	calls  int
	mu     sync.Mutex
	events []string
}

func (s *sessionLog) add(ev string) {
	s.calls++
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.mu.Unlock()
}

func (s *sessionLog) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.events...)
}

func (s *sessionLog) Connected(string, uint64, time.Time)    { s.add("connected") }
func (s *sessionLog) Subscribed(string, uint64, time.Time)   { s.add("subscribed") }
func (s *sessionLog) Disconnected(string, uint64, time.Time) { s.add("disconnected") }
func (s *sessionLog) Unsubscribed(string, uint64, time.Time) { s.add("unsubscribed") }
func (s *sessionLog) Deliver(_ string, _ uint64, frames [][]byte, _ time.Time) {
	if len(frames) != 4 || len(frames[2]) != 8 {
		s.add("malformed")
		return
	}
	s.add(fmt.Sprint(binary.BigEndian.Uint64(frames[2])))
}

// delivered lists the sequences delivered, in order.
func (s *sessionLog) delivered() []string {
	var out []string
	for _, ev := range s.snapshot() {
		if ev[0] >= '0' && ev[0] <= '9' {
			out = append(out, ev)
		}
	}
	return out
}

func seqs(first, last uint64) []string {
	var out []string
	for i := first; i <= last; i++ {
		out = append(out, fmt.Sprint(i))
	}
	return out
}

// warnings collects WARN records, to catch a stop that hit its grace.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	w.msgs = append(w.msgs, r.Message)
	w.mu.Unlock()
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }
func (w *warnings) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.msgs, "; ")
}

func parkingSupervisor(t *testing.T, sink eventplane.Sink, warn *warnings, pubs ...string) *eventplane.Supervisor {
	snap := &discovery.Snapshot{}
	for i, addr := range pubs {
		snap.Publishers = append(snap.Publishers, &discovery.Publisher{Namespace: "dynamo", PublisherID: uint64(i + 1),
			Topic: discovery.TopicLoad, TransportKind: "Zmq", Address: "tcp://" + addr})
	}
	sup := eventplane.NewSupervisor(eventplane.Family{Topic: discovery.TopicLoad, Limits: envelope.LoadLimits, Sink: sink},
		eventplane.Policy{Transport: eventplane.TransportDirect, Dialer: &eventplane.Dialer{}}, clock.Real{}, slog.New(warn), nil)
	sup.Reconcile(snap)
	return sup
}

func parked(sup *eventplane.Supervisor) func() bool {
	return func() bool {
		subs := sup.Subscriptions()
		return len(subs) > 0 && subs[0].State == eventplane.Connected && subs[0].Parked
	}
}

// An idle session parks; bursts, PINGs and a publisher's close wake it;
// every message arrives once and in order; the sink's calls never overlap;
// and a stop of a parked session completes without the stop grace.
func TestIdleSessionParksAndWakes(t *testing.T) {
	pub := newScriptedPublisher(t)
	log := &sessionLog{}
	warn := &warnings{}
	sup := parkingSupervisor(t, log, warn, pub.addr)
	defer sup.Stop()
	c := pub.next(t)
	eventually(t, "the idle session to park", parked(sup))

	// Bursts wake it; it parks again after each.
	var seq uint64
	for burst := range 3 {
		n := uint64(10 * (burst + 1))
		if _, err := c.Write(loadMessages(1, seq+1, seq+n)); err != nil {
			t.Fatal(err)
		}
		seq += n
		eventually(t, "the burst delivered", func() bool { return len(log.delivered()) == int(seq) })
		eventually(t, "the session to park again", parked(sup))
	}
	// A message split across a park: its first bytes wake the session,
	// which waits for the rest within MessageTimeout.
	msg := loadMessages(1, seq+1, seq+1)
	c.Write(msg[:5])
	eventually(t, "the session to wake", func() bool { return !sup.Subscriptions()[0].Parked })
	c.Write(msg[5:])
	seq++
	eventually(t, "the split message delivered", func() bool { return len(log.delivered()) == int(seq) })
	if got := log.delivered(); !slices.Equal(got, seqs(1, seq)) {
		t.Fatalf("delivered %v", got)
	}

	// A PING while parked is answered.
	eventually(t, "the session to park", parked(sup))
	before := len(c.received())
	c.Write([]byte{0x04, 7, 4, 'P', 'I', 'N', 'G', 0, 0})
	pong := []byte{0x04, 5, 4, 'P', 'O', 'N', 'G'}
	eventually(t, "a PONG", func() bool { return bytes.Contains(c.received()[before:], pong) })
	eventually(t, "the session to park after the PING", parked(sup))

	// The publisher closes a parked session: the subscription sees it,
	// reconnects and parks again.
	c.Close()
	c2 := pub.next(t)
	eventually(t, "the new session to park", parked(sup))
	c2.Write(loadMessages(1, 1, 3))
	eventually(t, "the new session's messages", func() bool { return len(log.delivered()) == int(seq)+3 })

	// Stop a parked session: the subscriber closes its side, the stop
	// does not wait out its grace, and the sink hears Unsubscribed only.
	eventually(t, "the session to park", parked(sup))
	sup.Stop()
	select {
	case <-c2.done:
	case <-time.After(15 * time.Second):
		t.Fatal("the stopped subscription kept its connection")
	}
	if w := warn.all(); strings.Contains(w, "grace") {
		t.Fatalf("warnings: %s", w)
	}
	want := []string{"subscribed", "connected"}
	want = append(want, seqs(1, seq)...)
	want = append(want, "disconnected", "connected", "1", "2", "3", "unsubscribed")
	if got := log.snapshot(); !slices.Equal(got, want) || log.calls != len(want) {
		t.Fatalf("sink calls (%d)\n got %v\nwant %v", log.calls, got, want)
	}
}

// Many parked sessions stop together, each woken by its stop.
func TestStopManyParkedSessions(t *testing.T) {
	const n = 64
	pubs := make([]string, n)
	pub := newScriptedPublisher(t)
	for i := range pubs {
		pubs[i] = pub.addr
	}
	warn := &warnings{}
	log := &sessionLog{}
	sup := parkingSupervisor(t, nopSink{log}, warn, pubs...)
	var conns []*pubConn
	for range n {
		conns = append(conns, pub.next(t))
	}
	eventually(t, "every session to park", func() bool {
		for _, s := range sup.Subscriptions() {
			if !s.Parked {
				return false
			}
		}
		return true
	})
	sup.Stop()
	if len(sup.Subscriptions()) != 0 {
		t.Fatal("subscriptions left after Stop")
	}
	for _, c := range conns {
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			t.Fatal("a stopped subscription kept its connection")
		}
	}
	if w := warn.all(); strings.Contains(w, "grace") {
		t.Fatalf("warnings: %s", w)
	}
}

// nopSink is a plain Sink (no session calls) over a sessionLog.
type nopSink struct{ log *sessionLog }

func (s nopSink) Connected(string, uint64, time.Time) {}
func (s nopSink) Deliver(ns string, id uint64, frames [][]byte, at time.Time) {
	s.log.Deliver(ns, id, frames, at)
}
