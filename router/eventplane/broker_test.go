package eventplane_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/clock"
	"switchyard/router/core"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/kv"
	"switchyard/router/load"
	"switchyard/router/picker"
)

// testBus stands in for the router's event-bus listener until it lands:
// each session covers some namespaces, and OpenStream connects to the
// publisher itself and relays its raw bytes both ways through an
// in-memory pipe, as a broker relays them over its stream. Nothing but
// bytes crosses it: the router's ZMTP client does the handshake, the
// ceilings and everything above. Placement is the lowest session id that
// covers the namespace.
type testBus struct {
	mu       sync.Mutex
	sessions map[string]*busSession
	changed  chan struct{}
	opened   []eventplane.BusTarget
}

type busSession struct {
	namespaces []string
	streams    map[net.Conn]net.Conn // router side → publisher side
}

func newTestBus() *testBus {
	return &testBus{sessions: map[string]*busSession{}, changed: make(chan struct{})}
}

// notify closes the current Changed channel; called with b.mu held.
func (b *testBus) notify() {
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *testBus) addSession(id string, namespaces ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sessions[id] = &busSession{namespaces: namespaces, streams: map[net.Conn]net.Conn{}}
	b.notify()
}

// killSession ends a session and every stream it carries, as a broker
// that dies does.
func (b *testBus) killSession(id string) {
	b.mu.Lock()
	s := b.sessions[id]
	delete(b.sessions, id)
	b.notify()
	var conns []net.Conn
	for r, p := range s.streams {
		conns = append(conns, r, p)
	}
	b.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// streams is how many streams a session carries.
func (b *testBus) streams(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sessions[id]; s != nil {
		return len(s.streams)
	}
	return 0
}

func (b *testBus) targets() []eventplane.BusTarget {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.opened)
}

func (b *testBus) covering(ns string) (string, *busSession) {
	ids := make([]string, 0, len(b.sessions))
	for id := range b.sessions {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if slices.Contains(b.sessions[id].namespaces, ns) {
			return id, b.sessions[id]
		}
	}
	return "", nil
}

func (b *testBus) Covers(ns string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, s := b.covering(ns)
	return s != nil
}

func (b *testBus) Sessions(ns string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, s := range b.sessions {
		if slices.Contains(s.namespaces, ns) {
			n++
		}
	}
	return n
}

func (b *testBus) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

func (b *testBus) OpenStream(ctx context.Context, t eventplane.BusTarget) (net.Conn, error) {
	b.mu.Lock()
	_, s := b.covering(t.Namespace)
	b.mu.Unlock()
	if s == nil {
		return nil, &eventplane.BusError{Code: eventplane.BusErrNoSession, Reason: "no session covers the namespace"}
	}
	var d net.Dialer
	pub, err := d.DialContext(ctx, "tcp", net.JoinHostPort(t.Host, strconv.Itoa(int(t.Port))))
	if err != nil {
		return nil, &eventplane.BusError{Code: eventplane.BusErrRefused, Reason: "the broker could not reach the publisher"}
	}
	router, relay := net.Pipe()
	b.mu.Lock()
	if b.sessions[sessionID(b, s)] == nil {
		b.mu.Unlock()
		pub.Close()
		return nil, &eventplane.BusError{Code: eventplane.BusErrSessionClosed, Reason: "session ended"}
	}
	s.streams[router] = pub
	b.opened = append(b.opened, t)
	b.mu.Unlock()
	end := func() {
		relay.Close()
		pub.Close()
		b.mu.Lock()
		delete(s.streams, router)
		b.mu.Unlock()
	}
	go func() { io.Copy(relay, pub); end() }()
	go func() { io.Copy(pub, relay); end() }()
	return router, nil
}

func sessionID(b *testBus, s *busSession) string {
	for id, x := range b.sessions {
		if x == s {
			return id
		}
	}
	return ""
}

var _ eventplane.Bus = (*testBus)(nil)

// pubSock is a publisher's zmq4 PUB socket with a fixed publisher id, so
// two runs can send the same bytes.
type pubSock struct {
	sock zmq4.Socket
	addr string
	id   uint64
	seq  uint64
}

func newPubSock(t *testing.T, id uint64) *pubSock {
	t.Helper()
	sock := zmq4.NewPub(context.Background())
	require.NoError(t, sock.Listen("tcp://127.0.0.1:0"))
	t.Cleanup(func() { sock.Close() })
	return &pubSock{sock: sock, addr: "tcp://" + sock.Addr().String(), id: id}
}

func (p *pubSock) subscribed(topic string) bool {
	tp, ok := p.sock.(zmq4.Topics)
	return ok && slices.Contains(tp.Topics(), topic)
}

func (p *pubSock) send(t *testing.T, frames [][]byte) {
	t.Helper()
	require.NoError(t, p.sock.Send(zmq4.NewMsgFrom(frames...)))
}

func (p *pubSock) kv(t *testing.T, rank uint32, eventID uint64, data wire.KvEventData) {
	p.seq++
	p.kvAs(t, p.id, p.seq, rank, eventID, data)
}

func (p *pubSock) kvAs(t *testing.T, id, seq uint64, rank uint32, eventID uint64, data wire.KvEventData) {
	ev := wire.RouterEvent{WorkerID: testWorker, StorageTier: "device", Event: wire.KvCacheEvent{EventID: eventID, DPRank: rank, Data: data}}
	p.send(t, wire.KVEventsMessage(id, seq, ev, time.Now()))
}

func (p *pubSock) load(t *testing.T, rank uint32, used uint64) {
	p.seq++
	p.send(t, wire.LoadMessage(p.id, p.seq, wire.ActiveLoad{WorkerID: testWorker, DPRank: rank, KVUsedBlocks: wire.U64(used)}, time.Now()))
}

func stored(parent *uint64, hashes ...uint64) wire.KvEventData {
	blocks := make([]wire.StoredBlock, len(hashes))
	for i, h := range hashes {
		blocks[i] = wire.StoredBlock{BlockHash: h, TokensHash: h}
	}
	return wire.KvEventData{Stored: &wire.KvStoreData{ParentHash: parent, Blocks: blocks}}
}

func removed(hashes ...uint64) wire.KvEventData {
	return wire.KvEventData{Removed: &wire.KvRemoveData{BlockHashes: hashes}}
}

const (
	testWorker  = 0x51
	loadPubID   = 0x1001
	kvPubID     = 0x2002
	foreignPub  = 0x9009
	testNS      = "dynamo"
	otherNS     = "elsewhere"
	kvTopic     = discovery.TopicKVEvents
	loadTopic   = discovery.TopicLoad
	waitTimeout = 15 * time.Second
)

// rig is a routing core fed by a kv_metrics and a kv-events supervisor,
// with sinks that keep every result in order.
type rig struct {
	shared      *core.Shared
	load, kv    *eventplane.Supervisor
	snap        *discovery.Snapshot
	mu          sync.Mutex
	loadResults []envelope.Result
	kvResults   []string
}

type rigLoadSink struct{ r *rig }

func (s rigLoadSink) Connected(ns string, id uint64, at time.Time) {
	s.r.shared.LoadConnected(ns, id, at)
}
func (s rigLoadSink) Deliver(ns string, id uint64, frames [][]byte, at time.Time) {
	res := s.r.shared.LoadMessage(ns, id, frames, at)
	s.r.mu.Lock()
	s.r.loadResults = append(s.r.loadResults, res)
	s.r.mu.Unlock()
}

type rigKVSink struct{ r *rig }

func (s rigKVSink) Subscribed(ns string, id uint64, at time.Time) {
	s.r.shared.KVSubscribed(ns, id, at)
}
func (s rigKVSink) Connected(ns string, id uint64, at time.Time) { s.r.shared.KVConnected(ns, id, at) }
func (s rigKVSink) Disconnected(ns string, id uint64, at time.Time) {
	s.r.shared.KVDisconnected(ns, id, at)
}
func (s rigKVSink) Unsubscribed(ns string, id uint64, at time.Time) {
	s.r.shared.KVUnsubscribed(ns, id, at)
}
func (s rigKVSink) Deliver(ns string, id uint64, frames [][]byte, at time.Time) {
	res := s.r.shared.KVMessage(ns, id, frames, at)
	s.r.mu.Lock()
	s.r.kvResults = append(s.r.kvResults, res)
	s.r.mu.Unlock()
}

func newRig(t *testing.T, p eventplane.Policy, log *slog.Logger, loadAddr, kvAddr string, kvStaleAfter time.Duration) *rig {
	t.Helper()
	c, err := core.New(core.Options{Picker: picker.NameKV, KVStaleAfter: kvStaleAfter})
	require.NoError(t, err)
	r := &rig{shared: core.NewShared(c, clock.Real{})}
	r.snap = &discovery.Snapshot{View: discovery.View{
		Workers: []*discovery.Worker{{Namespace: testNS, InstanceID: testWorker, Role: discovery.RoleDecode,
			Runtime: discovery.RuntimeConfig{DPSize: 2}}},
		Publishers: []*discovery.Publisher{
			{Namespace: testNS, PublisherID: loadPubID, Topic: loadTopic, ScopeKind: "endpoint", Component: "decode",
				Endpoint: "generate", TransportKind: "Zmq", Address: loadAddr},
			{Namespace: testNS, PublisherID: kvPubID, Topic: kvTopic, ScopeKind: "component", Component: "decode",
				TransportKind: "Zmq", Address: kvAddr},
		},
	}}
	r.shared.Store().SetLive(r.snap)
	r.shared.Tracker().SetLive(r.snap)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r.load = eventplane.NewSupervisor(eventplane.Family{Topic: loadTopic, Limits: envelope.LoadLimits, Sink: rigLoadSink{r}},
		p, clock.Real{}, log, nil)
	r.kv = eventplane.NewSupervisor(eventplane.Family{Topic: kvTopic, Limits: envelope.KVEventLimits, Sink: rigKVSink{r}},
		p, clock.Real{}, log, nil)
	n := r.load.ReconcileWithin(r.snap, eventplane.MaxSubscriptions)
	r.kv.ReconcileWithin(r.snap, eventplane.MaxSubscriptions-n)
	t.Cleanup(func() { r.load.Stop(); r.kv.Stop() })
	return r
}

func (r *rig) delivered() (loads, kvs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.loadResults), len(r.kvResults)
}

func (r *rig) results() ([]envelope.Result, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.loadResults), slices.Clone(r.kvResults)
}

func (r *rig) state(sup *eventplane.Supervisor) eventplane.State { return sup.Subscriptions()[0].State }

// rankBlocks is rank's block count in the KV index.
func (r *rig) rankBlocks(rank uint32) int {
	for _, rs := range r.shared.Tracker().Stats().Ranks {
		if rs.Rank.WorkerID == testWorker && rs.Rank.DPRank == rank {
			return rs.Blocks
		}
	}
	return 0
}

func directPolicy() eventplane.Policy {
	return eventplane.Policy{Transport: eventplane.TransportDirect, Dialer: &eventplane.Dialer{}}
}

func brokerPolicy(b eventplane.Bus) eventplane.Policy {
	return eventplane.Policy{Transport: eventplane.TransportBroker, Dialer: &eventplane.Dialer{}, Bus: b}
}

// loadView is what a rank's load sample says, without receipt times.
type loadView struct {
	Found      bool
	Publisher  uint64
	Sequence   uint64
	UsedBlocks uint64
}

func (r *rig) loadOf(rank uint32) loadView {
	s, ok := r.shared.Store().Latest(load.Key{Namespace: testNS, WorkerID: testWorker, DPRank: rank})
	if !ok {
		return loadView{}
	}
	return loadView{Found: true, Publisher: s.PublisherID, Sequence: s.Sequence, UsedBlocks: s.KVUsedBlocks}
}

// outcome is everything the same traffic leaves behind.
type outcome struct {
	LoadResults []envelope.Result
	KVResults   []string
	Loads       [2]loadView
	Index       kv.Stats
}

// sameTraffic sends one fixed sequence of kv_metrics and kv-events
// messages (late sequences, a foreign publisher id, a removal, a gap) and
// returns what the core made of it.
func sameTraffic(t *testing.T, policy func(loadAddr, kvAddr string) eventplane.Policy) outcome {
	loadPub, kvPub := newPubSock(t, loadPubID), newPubSock(t, kvPubID)
	r := newRig(t, policy(loadPub.addr, kvPub.addr), nil, loadPub.addr, kvPub.addr, 0)
	eventually(t, "both publishers subscribed to", func() bool {
		return loadPub.subscribed(loadTopic) && kvPub.subscribed(kvTopic) &&
			r.state(r.load) == eventplane.Connected && r.state(r.kv) == eventplane.Connected
	})
	h11 := uint64(11)
	kvPub.kv(t, 0, 1, stored(nil, 11, 12))           // seq 1
	kvPub.kv(t, 1, 1, stored(nil, 21))               // seq 2
	kvPub.kvAs(t, kvPubID, 1, 0, 1, stored(nil, 99)) // a late sequence
	kvPub.kvAs(t, foreignPub, 3, 0, 2, stored(nil, 98))
	kvPub.kv(t, 0, 2, removed(12))      // seq 3
	kvPub.kv(t, 1, 3, stored(&h11, 22)) // seq 4: rank 1 skipped event 2, a gap
	kvPub.kv(t, 0, 3, stored(&h11, 13)) // seq 5
	loadPub.load(t, 0, 5)               // seq 1
	loadPub.load(t, 1, 7)               // seq 2
	loadPub.seq = 1
	loadPub.load(t, 0, 50) // seq 2 again: late
	loadPub.send(t, wire.LoadMessage(foreignPub, 9, wire.ActiveLoad{WorkerID: testWorker, KVUsedBlocks: wire.U64(60)}, time.Now()))
	loadPub.seq = 2
	loadPub.load(t, 0, 6) // seq 3
	eventually(t, "every message delivered", func() bool {
		l, k := r.delivered()
		return l == 5 && k == 7
	})
	var o outcome
	o.LoadResults, o.KVResults = r.results()
	o.Loads = [2]loadView{r.loadOf(0), r.loadOf(1)}
	o.Index = r.shared.Tracker().Stats()
	return o
}

func blocksIn(st kv.Stats, rank uint32) int {
	for _, rs := range st.Ranks {
		if rs.Rank.WorkerID == testWorker && rs.Rank.DPRank == rank {
			return rs.Blocks
		}
	}
	return 0
}

// The same publisher traffic leaves the same load store and KV index
// whether the router dials the publishers or a broker relays them.
func TestBrokerTransportSameStateAsDirect(t *testing.T) {
	direct := sameTraffic(t, func(string, string) eventplane.Policy { return directPolicy() })
	bus := newTestBus()
	bus.addSession("broker-a", testNS)
	relayed := sameTraffic(t, func(string, string) eventplane.Policy { return brokerPolicy(bus) })
	require.Equal(t, direct, relayed)

	// The traffic did exercise the rules, not only the happy path.
	require.Equal(t, []envelope.Result{envelope.Applied, envelope.Applied, envelope.Duplicate,
		envelope.IdentityMismatch, envelope.Applied}, direct.LoadResults)
	require.Equal(t, []string{"applied", "applied", "replay", "identity_mismatch", "applied", "gap", "applied"}, direct.KVResults)
	require.Equal(t, 2, blocksIn(direct.Index, 0), "11, 12 stored, 12 removed, 13 stored")
	require.Equal(t, loadView{Found: true, Publisher: loadPubID, Sequence: 3, UsedBlocks: 6}, direct.Loads[0])

	// The broker was asked for each publisher by namespace, host, port
	// and topic.
	targets := bus.targets()
	require.Len(t, targets, 2)
	for _, bt := range targets {
		require.Equal(t, testNS, bt.Namespace)
		require.Equal(t, "127.0.0.1", bt.Host)
		require.NotZero(t, bt.Port)
	}
	topics := []string{targets[0].Topic, targets[1].Topic}
	slices.Sort(topics)
	require.Equal(t, []string{kvTopic, loadTopic}, topics)
}

// logRecords keeps the messages and attributes a logger was handed.
type logRecords struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.Key + "=" + a.Value.String(); return true })
	l.mu.Lock()
	l.msgs = append(l.msgs, line)
	l.mu.Unlock()
	return nil
}
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

func (l *logRecords) find(sub string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.Contains(m, sub) {
			return m, true
		}
	}
	return "", false
}

// kvRig is a rig whose kv-events publisher is a real PUB socket and whose
// kv_metrics publisher is absent (its subscription just retries).
func kvRig(t *testing.T, p eventplane.Policy, log *slog.Logger, staleAfter time.Duration) (*rig, *pubSock) {
	kvPub := newPubSock(t, kvPubID)
	r := newRig(t, p, log, "tcp://127.0.0.1:1", kvPub.addr, staleAfter)
	return r, kvPub
}

// waitSubscribed waits for the kv-events subscription to be connected
// and its subscription to have reached the PUB socket.
func waitSubscribed(t *testing.T, r *rig, p *pubSock) {
	t.Helper()
	eventually(t, "the kv-events subscription", func() bool {
		return r.state(r.kv) == eventplane.Connected && p.subscribed(kvTopic)
	})
}

// A broker session that ends leaves the subscription pending (it is not
// dialed directly); its blocks stay while the 60 s rule allows. A new
// session brings it back, after at most the wake jitter, and a removal
// published while nobody relayed it shows as a gap, which clears the rank.
func TestBrokerSessionDropPendingAndGapClears(t *testing.T) {
	bus := newTestBus()
	bus.addSession("broker-a", testNS)
	r, kvPub := kvRig(t, brokerPolicy(bus), nil, 0)
	waitSubscribed(t, r, kvPub)
	kvPub.kv(t, 0, 1, stored(nil, 11, 12))
	eventually(t, "two blocks", func() bool { return r.rankBlocks(0) == 2 })

	bus.killSession("broker-a")
	eventually(t, "pending", func() bool { return r.state(r.kv) == eventplane.Pending })
	sub := r.kv.Subscriptions()[0]
	require.Equal(t, eventplane.TransportBroker, sub.Transport)
	require.False(t, sub.Down.IsZero(), "a pending subscription is down")
	require.Equal(t, 2, r.rankBlocks(0), "blocks are kept within the 60 s rule")
	require.False(t, kvPub.subscribed(kvTopic), "nothing dialed the publisher directly")

	// Published while no broker relays it: missed.
	kvPub.kv(t, 0, 2, removed(12))

	woke := time.Now()
	bus.addSession("broker-b", testNS)
	waitSubscribed(t, r, kvPub)
	require.Less(t, time.Since(woke), 10*time.Second)
	require.Equal(t, 1, bus.streams("broker-b"))

	// The next event is two past the cursor: the gap clears the rank, so
	// the removed block is no longer credited.
	kvPub.kv(t, 0, 3, stored(nil, 31))
	eventually(t, "the gap", func() bool {
		_, res := r.results()
		return slices.Contains(res, "gap")
	})
	require.Less(t, r.rankBlocks(0), 2, "block 12, removed while unrelayed, is gone")
}

// Several sessions cover the namespace: when the one carrying the
// stream dies, the subscription is re-placed on the other at the
// reconnect floor, without going pending.
func TestBrokerSingleReconnectFailover(t *testing.T) {
	bus := newTestBus()
	bus.addSession("broker-a", testNS)
	bus.addSession("broker-b", testNS)
	logs := &logRecords{}
	r, kvPub := kvRig(t, brokerPolicy(bus), slog.New(logs), 0)
	waitSubscribed(t, r, kvPub)
	require.Equal(t, 1, bus.streams("broker-a"))

	bus.killSession("broker-a")
	eventually(t, "re-placed on broker-b", func() bool {
		return bus.streams("broker-b") == 1 && r.state(r.kv) == eventplane.Connected
	})
	line, ok := logs.find("re-placing")
	require.True(t, ok, "the carrier loss was recognised")
	require.Contains(t, line, "reconnect_in=500ms")
	_, pending := logs.find("subscription pending")
	require.False(t, pending, "a covering session remained: never pending")
}

// A kv-events subscription pending past the ageing limit loses its
// publisher's ranks (the core's staleness rule, fed by the supervisor).
func TestBrokerPendingAgesOutKVRanks(t *testing.T) {
	const staleAfter = 200 * time.Millisecond
	bus := newTestBus()
	bus.addSession("broker-a", testNS)
	r, kvPub := kvRig(t, brokerPolicy(bus), nil, staleAfter)
	waitSubscribed(t, r, kvPub)
	kvPub.kv(t, 0, 1, stored(nil, 11))
	eventually(t, "a block", func() bool { return r.rankBlocks(0) == 1 })
	require.Zero(t, r.shared.Tick(time.Now()), "connected: nothing ages")

	bus.killSession("broker-a")
	eventually(t, "pending", func() bool { return r.state(r.kv) == eventplane.Pending })
	eventually(t, "the ranks aged out", func() bool {
		r.shared.Tick(time.Now())
		return r.rankBlocks(0) == 0
	})
}

// Switching dynamo.load.transport restarts the subscriptions over the
// new transport without clearing the KV index: the restarted kv-events
// subscription carries the rank's cursor, so the next event applies
// without a gap. Stopping the family for good clears its ranks.
func TestTransportSwitchKeepsState(t *testing.T) {
	r, kvPub := kvRig(t, directPolicy(), nil, 0)
	waitSubscribed(t, r, kvPub)
	kvPub.kv(t, 0, 1, stored(nil, 11, 12))
	eventually(t, "two blocks", func() bool { return r.rankBlocks(0) == 2 })

	bus := newTestBus()
	bus.addSession("broker-a", testNS)
	r.kv.SetPolicy(brokerPolicy(bus))
	require.Equal(t, eventplane.TransportBroker, r.kv.Subscriptions()[0].Transport)
	eventually(t, "relayed", func() bool { return bus.streams("broker-a") == 1 })
	waitSubscribed(t, r, kvPub)
	require.Equal(t, 2, r.rankBlocks(0), "the switch kept the index")

	kvPub.kv(t, 0, 2, stored(nil, 13))
	eventually(t, "the next event", func() bool { return r.rankBlocks(0) == 3 })
	_, res := r.results()
	require.Equal(t, []string{"applied", "applied"}, res, "the cursor carried over: no gap")

	r.kv.Stop()
	require.Zero(t, r.rankBlocks(0), "a stopped subscription's ranks are cleared")
}

// A namespace no session covers keeps its subscriptions pending, and the
// debounced coverage report says so, next to a covered namespace.
func TestUncoveredNamespaceStaysPendingAndIsReported(t *testing.T) {
	bus := newTestBus()
	bus.addSession("broker-a", otherNS) // covers another namespace only
	r, kvPub := kvRig(t, brokerPolicy(bus), nil, 0)
	rep := eventplane.NewCoverageReporter(clock.Real{}, bus, func() []string { return []string{testNS, otherNS} }, r.load, r.kv)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rep.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()

	want := []eventplane.NamespaceCoverage{
		{Namespace: testNS, Sessions: 0, Pending: map[string]int{loadTopic: 1, kvTopic: 1}},
		{Namespace: otherNS, Sessions: 1, Pending: map[string]int{loadTopic: 0, kvTopic: 0}},
	}
	slices.SortFunc(want, func(a, b eventplane.NamespaceCoverage) int { return strings.Compare(a.Namespace, b.Namespace) })
	eventually(t, "the coverage report", func() bool {
		got := rep.Coverage()
		return len(got) == 2 && got[0].Pending[kvTopic] == 1 && got[0].Pending[loadTopic] == 1
	})
	require.Equal(t, want, rep.Coverage())
	require.Equal(t, eventplane.Pending, r.state(r.kv))
	require.Empty(t, bus.targets(), "nothing was opened for the uncovered namespace")
	require.False(t, kvPub.subscribed(kvTopic), "nor dialed directly")

	// A session for the namespace: the subscriptions leave pending and the
	// report follows.
	bus.addSession("broker-b", testNS)
	waitSubscribed(t, r, kvPub)
	eventually(t, "the report to follow", func() bool {
		got := rep.Coverage()
		return got[0].Namespace == testNS && got[0].Sessions == 1 && got[0].Pending[kvTopic] == 0
	})
}

// leakyBus returns whatever error or stream it is given.
type leakyBus struct {
	err  error
	conn net.Conn
}

func (b leakyBus) OpenStream(context.Context, eventplane.BusTarget) (net.Conn, error) {
	return b.conn, b.err
}
func (leakyBus) Covers(string) bool       { return true }
func (leakyBus) Changed() <-chan struct{} { return make(chan struct{}) }

// blockingClose is a stream whose Close never returns on its own.
type blockingClose struct {
	net.Conn
	release chan struct{}
}

func (c blockingClose) Close() error { <-c.release; return nil }

// Errors the bus did not redact are replaced, and a stream whose close
// hangs is abandoned after the close timeout.
func TestBrokerConnectorRedactsAndBoundsClose(t *testing.T) {
	target := eventplane.Target{Namespace: testNS, PublisherID: 1, HostPort: "10.0.0.1:5557"}
	c := eventplane.BrokerConnector{Bus: leakyBus{err: io.ErrUnexpectedEOF}}
	_, err := c.Connect(context.Background(), target, []byte(kvTopic))
	var be *eventplane.BusError
	require.ErrorAs(t, err, &be)
	require.Equal(t, eventplane.BusErrRefused, be.Code)
	require.NotContains(t, err.Error(), io.ErrUnexpectedEOF.Error(), "the bus's own text is not passed on")

	_, err = c.Connect(context.Background(), eventplane.Target{Namespace: testNS, HostPort: "10.0.0.1:0"}, nil)
	require.ErrorAs(t, err, &be)
	require.Equal(t, eventplane.BusErrInvalidTarget, be.Code)

	a, b := net.Pipe()
	defer b.Close()
	release := make(chan struct{})
	defer close(release)
	c = eventplane.BrokerConnector{Bus: leakyBus{conn: blockingClose{Conn: a, release: release}}}
	conn, err := c.Connect(context.Background(), target, []byte(kvTopic))
	require.NoError(t, err)
	start := time.Now()
	err = conn.Close()
	require.ErrorAs(t, err, &be)
	require.Equal(t, eventplane.BusErrBusy, be.Code)
	require.Less(t, time.Since(start), eventplane.BusCloseTimeout+2*time.Second)
	require.GreaterOrEqual(t, time.Since(start), eventplane.BusCloseTimeout)
}
