// Package kvlistener is the source side of switchyard kv-listener: it
// takes the kv-events of the workers of one or more backends, frames each
// event as SSE with a per-backend increasing id in a bounded replay ring,
// and serves the router's subscribes (through the event-bus agent of
// router/bus/broker in its kv_listener role) from the id the router last
// applied, with a reset when those events are no longer held.
package kvlistener

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"switchyard/router/bus/wire"
	"switchyard/router/kv"
	"switchyard/router/kvsource"
)

// Defaults and bounds.
const (
	DefaultRingEvents = 4096
	DefaultRingBytes  = 8 << 20
	// MinRingBytes holds at least one event of the largest size.
	MinRingBytes = kvsource.MaxEventBytes + 256
	// MaxRingEvents caps the ring's count bound.
	MaxRingEvents = 1 << 20
	// KeepaliveInterval is how often an idle stream gets a comment, well
	// inside the router's read timeout.
	KeepaliveInterval = 10 * time.Second
)

// Backend is one announced source: the workers of a Dynamo namespace.
type Backend struct {
	Name      string
	Namespace string
}

// Config is one listener.
type Config struct {
	Backends   []Backend
	RingEvents int   // 0: DefaultRingEvents
	RingBytes  int64 // 0: DefaultRingBytes
	// FirstID is the first event id of every backend (0: 1). A process
	// starting from its start time in microseconds numbers above its
	// previous run, so a router's old id is never mistaken for a new one.
	FirstID   uint64
	Keepalive time.Duration // 0: KeepaliveInterval
	Log       *slog.Logger
	Metrics   *Metrics
}

// Listener holds the backends' rings.
type Listener struct {
	log       *slog.Logger
	met       *Metrics
	keepalive time.Duration
	backends  map[string]*source
	byNS      map[string][]*source
	decoders  sync.Pool
}

// source is one backend's ring and its waiting streams.
type source struct {
	name string
	mu   sync.Mutex
	ring *Ring
	// changed is closed and replaced at every push.
	changed chan struct{}
}

// New checks c.
func New(c Config) (*Listener, error) {
	if c.RingEvents == 0 {
		c.RingEvents = DefaultRingEvents
	}
	if c.RingBytes == 0 {
		c.RingBytes = DefaultRingBytes
	}
	if c.RingEvents < 1 || c.RingEvents > MaxRingEvents {
		return nil, fmt.Errorf("ring events must be 1-%d, got %d", MaxRingEvents, c.RingEvents)
	}
	if c.RingBytes < MinRingBytes {
		return nil, fmt.Errorf("ring bytes must be at least %d (one event of the largest size), got %d", MinRingBytes, c.RingBytes)
	}
	if len(c.Backends) == 0 || len(c.Backends) > wire.MaxSources {
		return nil, fmt.Errorf("serve 1 to %d backends", wire.MaxSources)
	}
	if c.FirstID == 0 {
		c.FirstID = 1
	}
	if c.Keepalive <= 0 {
		c.Keepalive = KeepaliveInterval
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	l := &Listener{log: c.Log, met: c.Metrics, keepalive: c.Keepalive, backends: map[string]*source{}, byNS: map[string][]*source{}}
	l.decoders.New = func() any { return &decoder{dec: kv.NewKVEventsDecoder()} }
	for _, b := range c.Backends {
		if b.Name == "" || b.Namespace == "" {
			return nil, errors.New("a backend needs a name and a Dynamo namespace")
		}
		if l.backends[b.Name] != nil {
			return nil, fmt.Errorf("backend %q given twice", b.Name)
		}
		s := &source{name: b.Name, ring: NewRing(c.RingEvents, c.RingBytes, c.FirstID), changed: make(chan struct{})}
		l.backends[b.Name] = s
		l.byNS[b.Namespace] = append(l.byNS[b.Namespace], s)
	}
	return l, nil
}

// Backends are the announced backends' names, sorted.
func (l *Listener) Backends() []string {
	out := make([]string, 0, len(l.backends))
	for n := range l.backends {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Namespaces are the Dynamo namespaces whose workers are followed, sorted.
func (l *Listener) Namespaces() []string {
	out := make([]string, 0, len(l.byNS))
	for ns := range l.byNS {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}

type decoder struct {
	dec *kv.KVEventsDecoder
	ev  kv.Event
}

// Deliver takes one kv-events message of a worker in namespace (the
// eventplane sink of the listener's subscriptions): a valid event is
// framed once and pushed to every backend of the namespace.
func (l *Listener) Deliver(namespace string, publisherID uint64, frames [][]byte, at time.Time) {
	srcs := l.byNS[namespace]
	if len(srcs) == 0 {
		return
	}
	d := l.decoders.Get().(*decoder)
	defer l.decoders.Put(d)
	pub, _, res := d.dec.Decode(frames, &d.ev)
	if res != kv.DecodeOK {
		l.met.Events.WithLabelValues(res.String()).Inc()
		return
	}
	if pub != publisherID {
		l.met.Events.WithLabelValues(kv.DecodeIdentityMismatch.String()).Inc()
		return
	}
	e := kvsource.FromKV(&d.ev)
	data, err := json.Marshal(&e)
	if err != nil || len(data) > kvsource.MaxEventBytes {
		l.met.Events.WithLabelValues(ResultTooLarge).Inc()
		return
	}
	for _, s := range srcs {
		s.mu.Lock()
		before, bytesBefore := s.ring.Len(), s.ring.Bytes()
		_, evicted, _ := s.ring.Push(func(id uint64) []byte { return kvsource.AppendSSE(nil, id, kvsource.TypeKV, data) })
		l.met.RingEvents.Add(float64(s.ring.Len() - before))
		l.met.RingBytes.Add(float64(s.ring.Bytes() - bytesBefore))
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		l.met.Evicted.Add(float64(evicted))
	}
	l.met.Events.WithLabelValues(ResultForwarded).Inc()
}

// The kv-events subscriptions' life needs no action here: a worker's
// missed events show as a gap in its event ids, which the router acts on.
func (l *Listener) Subscribed(string, uint64, time.Time)   {}
func (l *Listener) Connected(string, uint64, time.Time)    {}
func (l *Listener) Disconnected(string, uint64, time.Time) {}
func (l *Listener) Unsubscribed(string, uint64, time.Time) {}

// Serve answers a subscribe: a connection whose reads are the backend's
// SSE stream after t.LastEventID, then live events, until it is closed.
// Writes to it are discarded. It is the kv_listener's broker.Config.Serve;
// the stream outlives ctx.
func (l *Listener) Serve(_ context.Context, t wire.Target) (net.Conn, error) {
	s := l.backends[t.Backend]
	if s == nil {
		return nil, fmt.Errorf("backend %q is not announced here", t.Backend)
	}
	ours, theirs := net.Pipe()
	var cursor *uint64
	if t.LastEventID != nil {
		c := *t.LastEventID
		cursor = &c
	}
	closed := make(chan struct{})
	go func() {
		// The router sends nothing on an SSE stream; whatever comes is
		// dropped, and the read ends when the stream closes.
		io.Copy(io.Discard, ours)
		close(closed)
	}()
	go l.stream(s, ours, cursor, closed)
	return theirs, nil
}

// stream writes the backend's events after cursor, then live ones.
func (l *Listener) stream(s *source, w net.Conn, cursor *uint64, closed <-chan struct{}) {
	defer w.Close()
	l.met.Streams.Inc()
	defer l.met.Streams.Dec()
	var frames [][]byte
	keepalive := time.NewTimer(l.keepalive)
	defer keepalive.Stop()
	for {
		s.mu.Lock()
		var lost bool
		var resetID, next uint64
		frames, lost, resetID, next = s.ring.After(frames[:0], cursor)
		changed := s.changed
		s.mu.Unlock()
		if lost {
			l.met.Resets.Inc()
			if _, err := w.Write(kvsource.AppendSSE(nil, resetID, kvsource.TypeReset, []byte("{}"))); err != nil {
				return
			}
		}
		for _, f := range frames {
			if _, err := w.Write(f); err != nil {
				return
			}
		}
		if len(frames) > 0 || lost {
			cursor = &next
			continue
		}
		if cursor == nil {
			cursor = &next
		}
		select {
		case <-changed:
		case <-keepalive.C:
			if _, err := w.Write([]byte(kvsource.Keepalive)); err != nil {
				return
			}
			keepalive.Reset(l.keepalive)
		case <-closed:
			return
		}
	}
}
