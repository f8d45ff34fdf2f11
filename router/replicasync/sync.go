// Package replicasync is the host side of replica sync: it batches the
// core's changes to the replica's own requests (core.Hooks.Sync) and
// publishes them, and it hands its peers' batches to the core
// (core.Shared.PeerBatch). Delivery is best effort: a batch lost on the
// way shows as a gap in its sender's sequence, counted by the core, and
// the core's time rules let go of what a lost end would have released.
//
// The transport is ZMQ by default: each replica binds a PUB socket (the
// project's zmtp.PubConn) and subscribes, with the project's bounded SUB
// client, to each peer's (a static list, or one SetPeers keeps current).
// A batch is two frames: the topic "switchyard.replica_sync.<namespace>"
// and the encoded batch (router/replica). With TransportNATS every replica
// publishes the encoded batch on the NATS subject of the same name and
// subscribes to it (nats.go).
package replicasync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/router/active"
	"switchyard/router/eventplane/zmtp"
	"switchyard/router/replica"
)

// Batching and liveness.
const (
	// MaxBatchDelay is the longest an event waits for its batch to fill.
	MaxBatchDelay = time.Millisecond
	// Heartbeat is how often an idle replica sends an empty batch, so its
	// peers know it is alive (core.PeerSilentAfter drops a silent one).
	Heartbeat = time.Second
	// queueLen bounds the events waiting to be batched; beyond it events
	// are dropped and counted.
	queueLen = 8192
	// subscriberQueue bounds the batches waiting for one slow subscriber.
	subscriberQueue = 64
)

// Target receives the peers' batches: the core.
type Target interface {
	PeerBatch(b replica.Batch, at time.Time)
}

// Transports.
const (
	TransportZMQ  = "zmq"
	TransportNATS = "nats"
)

// Options configure a Sync.
type Options struct {
	// Transport is TransportZMQ (the default) or TransportNATS.
	Transport string
	// NATSURL is the NATS server (or comma-separated servers) of
	// TransportNATS.
	NATSURL string
	// ReplicaID names this replica to its peers; 0 draws one at random
	// (a restarted replica is a new peer).
	ReplicaID uint64
	// Namespace scopes the topic: replicas of one namespace sync.
	Namespace string
	// Listen is the PUB socket's address (host:port), for TransportZMQ.
	Listen string
	// Peers are the peers' PUB addresses (host:port), for TransportZMQ;
	// this replica's own address may be among them (its batches are
	// skipped). SetPeers replaces them.
	Peers []string
	// Heartbeat replaces Heartbeat when set (tests).
	Heartbeat time.Duration
	Log       *slog.Logger
	Metrics   *Metrics

	// natsPendingMsgs replaces natsPendingMsgs when set (tests).
	natsPendingMsgs int
}

// Sync is one replica's replica-sync host.
type Sync struct {
	id      uint64
	topic   []byte
	opts    Options
	log     *slog.Logger
	m       *Metrics
	in      chan replica.Event
	ln      net.Listener
	limits  zmtp.Limits
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	conns   map[net.Conn]struct{}
	closed  bool
	scratch []byte

	// nats is the NATS link of TransportNATS; nil with ZMQ.
	nats *natsLink

	// ctx, target and followers are set by Start: the peers followed now,
	// each with the cancel of its follower (under mu).
	ctx       context.Context
	target    Target
	followers map[string]context.CancelFunc
}

type subscriber struct {
	pc *zmtp.PubConn
	q  chan []byte
}

// New binds the PUB socket; Start starts publishing and following peers.
// Publish may be called as soon as New returns.
func New(o Options) (*Sync, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.ReplicaID == 0 {
		o.ReplicaID = rand.Uint64() | 1
	}
	s := &Sync{id: o.ReplicaID, topic: []byte(Topic(o.Namespace)), opts: o, log: o.Log, m: o.Metrics,
		in: make(chan replica.Event, queueLen), subs: map[*subscriber]struct{}{}, conns: map[net.Conn]struct{}{},
		followers: map[string]context.CancelFunc{},
		limits: zmtp.Limits{MaxFrameBytes: replica.MaxBatchBytes, MaxFramesPerMessage: 2,
			MaxMessageBytes: replica.MaxBatchBytes + zmtp.MaxTopicBytes, MaxCommandBytes: 1 << 10,
			HandshakeTimeout: 10 * time.Second, MessageTimeout: 30 * time.Second}}
	switch o.Transport {
	case "", TransportZMQ:
		ln, err := net.Listen("tcp", o.Listen)
		if err != nil {
			return nil, fmt.Errorf("replica sync: listen on %s: %w", o.Listen, err)
		}
		s.ln = ln
	case TransportNATS:
		if err := CheckSubject(s.Topic()); err != nil {
			return nil, fmt.Errorf("replica sync: %w", err)
		}
		l, err := dialNATS(s)
		if err != nil {
			return nil, err
		}
		s.nats = l
	default:
		return nil, fmt.Errorf("replica sync: unknown transport %q (zmq or nats)", o.Transport)
	}
	return s, nil
}

// Topic is the ZMQ topic and the NATS subject of a namespace's replicas.
func Topic(namespace string) string { return "switchyard.replica_sync." + namespace }

// ID is this replica's id.
func (s *Sync) ID() uint64 { return s.id }

// Topic is this replica's ZMQ topic or NATS subject.
func (s *Sync) Topic() string { return string(s.topic) }

// Addr is the PUB socket's bound address; empty over NATS.
func (s *Sync) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Publish queues one change to the replica's own requests; it never
// blocks (it runs inside the core's calls): a full queue drops the event
// and counts it.
func (s *Sync) Publish(ev replica.Event) {
	if ev.Holds != nil {
		ev.Holds = append([]active.Hold(nil), ev.Holds...)
	}
	select {
	case s.in <- ev:
	default:
		s.m.Dropped.WithLabelValues("queue_full").Inc()
	}
}

// Start publishes batches and follows the peers until Close.
func (s *Sync) Start(target Target) {
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.ctx, s.cancel, s.target = ctx, cancel, target
	peers := s.opts.Peers
	s.mu.Unlock()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.batchLoop(ctx) }()
	if s.nats != nil {
		if err := s.nats.subscribe(target); err != nil {
			s.log.Error("replica sync: NATS subscription failed", "subject", s.Topic(), "err", err)
		}
		return
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.acceptLoop() }()
	s.SetPeers(peers)
}

// SetPeers replaces the peers followed (ZMQ; ignored over NATS, where the
// subject reaches every peer): new addresses are followed, the followers
// of addresses no longer listed stop. Before Start it sets the list Start
// follows.
func (s *Sync) SetPeers(addrs []string) {
	if s.nats != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.ctx == nil {
		s.opts.Peers = slices.Clone(addrs)
		return
	}
	want := map[string]bool{}
	for _, a := range addrs {
		want[a] = true
	}
	for a, cancel := range s.followers {
		if !want[a] {
			cancel()
			delete(s.followers, a)
		}
	}
	for a := range want {
		if _, ok := s.followers[a]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(s.ctx)
		s.followers[a] = cancel
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.follow(ctx, a, s.target) }()
	}
	s.opts.Peers = slices.Clone(addrs)
}

// Peers are the addresses followed now (ZMQ).
func (s *Sync) Peers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.opts.Peers)
}

// Close stops everything and waits for it.
func (s *Sync) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	if s.cancel != nil {
		s.cancel()
	}
	if s.ln != nil {
		s.ln.Close()
	}
	s.wg.Wait()
	if s.nats != nil {
		s.nats.close()
	}
}

// batchLoop sends a batch when it holds replica.MaxEvents events or its
// first event has waited MaxBatchDelay, and a heartbeat when idle.
func (s *Sync) batchLoop(ctx context.Context) {
	hb := s.opts.Heartbeat
	if hb <= 0 {
		hb = Heartbeat
	}
	idle := time.NewTimer(hb)
	defer idle.Stop()
	fill := time.NewTimer(time.Hour)
	fill.Stop()
	var seq uint64
	batch := make([]replica.Event, 0, replica.MaxEvents)
	send := func() {
		seq++
		b := replica.Batch{Replica: s.id, Seq: seq, Events: batch}
		p, err := replica.Append(s.scratch[:0], &b)
		if err != nil {
			s.m.Dropped.WithLabelValues("unencodable").Add(float64(len(batch)))
			s.log.Warn("replica sync: batch not encodable", "err", err)
		} else {
			s.scratch = p
			s.broadcast(p)
			s.m.Published.Add(float64(len(batch)))
			s.m.Batches.Inc()
		}
		batch = batch[:0]
		idle.Reset(hb)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-idle.C:
			send()
			continue
		case ev := <-s.in:
			batch = append(batch, ev)
		}
		fill.Reset(MaxBatchDelay)
	collect:
		for len(batch) < replica.MaxEvents {
			select {
			case <-ctx.Done():
				return
			case ev := <-s.in:
				batch = append(batch, ev)
			case <-fill.C:
				break collect
			}
		}
		if !fill.Stop() {
			select {
			case <-fill.C:
			default:
			}
		}
		send()
	}
}

// broadcast queues the encoded batch to every subscriber of the topic; a
// subscriber whose queue is full misses it (its sequence shows the gap).
// Over NATS it publishes the batch on the subject.
func (s *Sync) broadcast(p []byte) {
	if s.nats != nil {
		s.nats.publish(p)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var cp []byte
	for sub := range s.subs {
		if !sub.pc.Subscribed(s.topic) {
			continue
		}
		if cp == nil {
			cp = append([]byte(nil), p...)
		}
		select {
		case sub.q <- cp:
		default:
			s.m.Dropped.WithLabelValues("slow_subscriber").Inc()
		}
	}
}

func (s *Sync) acceptLoop() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			conn.Close()
			return
		}
		s.conns[conn] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serve(conn)
		}()
	}
}

// serve runs one subscriber connection: its reader (subscriptions) and
// its writer (batches).
func (s *Sync) serve(conn net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		conn.Close()
	}()
	pc, err := zmtp.AcceptPub(conn, s.limits)
	if err != nil {
		s.log.Debug("replica sync: subscriber refused", "remote", conn.RemoteAddr().String(), "err", err)
		return
	}
	sub := &subscriber{pc: pc, q: make(chan []byte, subscriberQueue)}
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	s.m.Subscribers.Inc()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range sub.q {
			if err := pc.WriteMessage(s.topic, p); err != nil {
				conn.Close()
				for range sub.q { // drain until the reader side closes q
				}
				return
			}
		}
	}()
	err = pc.Run()
	s.mu.Lock()
	delete(s.subs, sub)
	s.mu.Unlock()
	close(sub.q)
	conn.Close()
	<-done
	s.m.Subscribers.Dec()
	s.log.Debug("replica sync: subscriber left", "remote", conn.RemoteAddr().String(), "err", err)
}

// follow subscribes to one peer's PUB socket, reconnecting with backoff,
// and hands its batches to the target.
func (s *Sync) follow(ctx context.Context, addr string, target Target) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.session(ctx, addr, target)
		if ctx.Err() != nil || errors.Is(err, errSelf) {
			return
		}
		s.log.Debug("replica sync: peer session ended", "peer", addr, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

var errSelf = errors.New("the peer is this replica")

func (s *Sync) session(ctx context.Context, addr string, target Target) error {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()
	sub, err := zmtp.Handshake(conn, [][]byte{s.topic}, s.limits)
	if err != nil {
		return err
	}
	s.m.PeersConnected.Inc()
	defer s.m.PeersConnected.Dec()
	var b replica.Batch
	for {
		msg, err := sub.ReadMessage()
		if err != nil {
			return err
		}
		if len(msg) != 2 || string(msg[0]) != string(s.topic) {
			s.m.Refused.WithLabelValues("shape").Inc()
			continue
		}
		if s.receive(msg[1], &b, target) {
			return errSelf // our own socket listed as a peer: stop reading it
		}
	}
}

// receive decodes one peer batch into b and hands it to the target; a
// refused batch is counted. It reports whether the batch is this
// replica's own (not applied).
func (s *Sync) receive(p []byte, b *replica.Batch, target Target) (self bool) {
	if id, _, err := replica.Header(p); err == nil && id == s.id {
		return true
	}
	if err := replica.Decode(p, b); err != nil {
		reason := "malformed"
		var de *replica.DecodeError
		if errors.As(err, &de) {
			reason = de.Reason
		}
		s.m.Refused.WithLabelValues(reason).Inc()
		return false
	}
	s.m.Received.Add(float64(len(b.Events)))
	target.PeerBatch(*b, time.Now())
	return false
}

// Metrics are replica sync's Prometheus collectors.
type Metrics struct {
	Published, Batches, Received prometheus.Counter
	Dropped, Refused             *prometheus.CounterVec
	Gaps                         prometheus.Counter
	PeersConnected, Subscribers  prometheus.Gauge
	// NATSConnected is 1 while the NATS link is up; NATSReconnects
	// counts its reconnections (TransportNATS).
	NATSConnected  prometheus.Gauge
	NATSReconnects prometheus.Counter
}

// NewMetrics makes the collectors; Register adds them to a registry.
func NewMetrics() *Metrics {
	return &Metrics{
		Published: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_replica_sync_events_published_total",
			Help: "Changes to this replica's requests published to its peers."}),
		Batches: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_replica_sync_batches_published_total",
			Help: "Batches published, heartbeats included."}),
		Received: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_replica_sync_events_received_total",
			Help: "Peer events received and handed to the core."}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_replica_sync_events_dropped_total",
			Help: "Events not published (queue_full, unencodable), batches a slow subscriber missed (slow_subscriber), and peer events the core did not apply, by reason."},
			[]string{"reason"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_replica_sync_batches_refused_total",
			Help: "Peer batches refused by the decoder, by reason."}, []string{"reason"}),
		Gaps: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_replica_sync_batch_gaps_total",
			Help: "Batches peers sent that never arrived (gaps in their sequence numbers)."}),
		PeersConnected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_replica_sync_peers_connected",
			Help: "Peers whose PUB socket this replica is subscribed to."}),
		Subscribers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_replica_sync_subscribers",
			Help: "Peers subscribed to this replica's PUB socket."}),
		NATSConnected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_replica_sync_nats_connected",
			Help: "1 while this replica's link to the NATS server is up (transport nats)."}),
		NATSReconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_replica_sync_nats_reconnects_total",
			Help: "Reconnections of this replica's link to the NATS server (transport nats)."}),
	}
}

// Register adds the collectors to r.
func (m *Metrics) Register(r prometheus.Registerer) {
	r.MustRegister(m.Published, m.Batches, m.Received, m.Dropped, m.Refused, m.Gaps, m.PeersConnected, m.Subscribers,
		m.NATSConnected, m.NATSReconnects)
}

// CountGap and CountRefused are the core's PeerGap and PeerRefused hooks.
func (m *Metrics) CountGap(n uint64) { m.Gaps.Add(float64(n)) }
func (m *Metrics) CountRefused(reason string, n uint64) {
	m.Dropped.WithLabelValues(reason).Add(float64(n))
}
