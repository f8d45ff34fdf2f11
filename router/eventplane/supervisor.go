package eventplane

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane/zmtp"
)

// Subscription bounds and timings.
const (
	// MaxSubscriptions caps open subscriptions, so fleet records cannot
	// exhaust descriptors. It is one budget for every family of a process:
	// the host hands each supervisor what the families before it left
	// (ReconcileWithin); each admits its publishers in ascending id.
	MaxSubscriptions = 1024
	// BackoffInitial and BackoffMax bound the full-jitter reconnect delay.
	BackoffInitial = 500 * time.Millisecond
	BackoffMax     = 30 * time.Second
	// StableSession is how long a session must last to reset the backoff.
	StableSession = 30 * time.Second
	// StopGrace bounds the wait for cancelled subscriptions.
	StopGrace = 5 * time.Second
)

// Transport names (dynamo.load.transport).
const (
	TransportDirect = "direct"
	TransportBroker = "broker"
)

// Sink receives what a family's subscriptions read. Calls for one
// publisher never overlap and come in order (an idle session that parked
// resumes on another goroutine, after the last call returned).
type Sink interface {
	// Connected: a session with the publisher began.
	Connected(namespace string, publisherID uint64, at time.Time)
	// Deliver hands one message; frames alias transport buffers and must
	// not be kept. What became of the message is the sink's to count.
	Deliver(namespace string, publisherID uint64, frames [][]byte, at time.Time)
}

// SessionSink is a Sink that also follows each subscription's life: a
// subscription that starts (or restarts, under a new dial policy or
// address) has no session until Connected; Disconnected reports a session
// that ended while the subscription ran; Unsubscribed a subscription
// stopped for good (its publisher left, the family was stopped, or the cap
// left no room for it). The kv-events staleness rule runs on these.
type SessionSink interface {
	Sink
	Subscribed(namespace string, publisherID uint64, at time.Time)
	Disconnected(namespace string, publisherID uint64, at time.Time)
	Unsubscribed(namespace string, publisherID uint64, at time.Time)
}

// A ReplaySessionSink is a SessionSink that also hears, as each
// subscription starts, whether its publisher offers replay (a usable
// replay endpoint): it is told through SubscribedReplay instead of
// Subscribed. A changed offer restarts the subscription, so the sink hears
// it again.
type ReplaySessionSink interface {
	SessionSink
	SubscribedReplay(namespace string, publisherID uint64, replay bool, at time.Time)
}

// Family is one followed topic: its name for operators, its ZMTP ceilings
// and where its messages go.
type Family struct {
	Topic  string
	Limits zmtp.Limits
	Sink   Sink
	// AllTopics subscribes to every message of the publisher instead of
	// those whose first frame starts with Topic: a vLLM engine's own KV
	// event publisher names its topic freely ("" by default, kv@<ip>@<model>
	// on llm-d's simulator), so a subscription to it cannot filter by name.
	AllTopics bool
}

// prefix is the subscription the family sends its publishers.
func (f Family) prefix() []byte {
	if f.AllTopics {
		return []byte{}
	}
	return []byte(f.Topic)
}

// Policy is how subscriptions reach publishers.
type Policy struct {
	// Transport is direct or broker. Broker subscriptions never fall back
	// to dialing directly: without a Bus they stay pending.
	Transport string
	Dialer    *Dialer
	// Bus carries broker subscriptions (the event-bus listener).
	Bus Bus
}

// connector is how p reaches publishers; nil for broker without a bus.
func (p Policy) connector(clk clock.Clock) Connector {
	if p.Transport == TransportDirect {
		return DirectConnector{Dialer: p.Dialer}
	}
	if p.Bus == nil {
		return nil
	}
	return BrokerConnector{Bus: p.Bus, Clock: clk}
}

// State of one subscription.
type State uint32

const (
	Pending State = iota
	Connecting
	Connected
	Backoff
)

// States lists every state, for metric series.
var States = []State{Pending, Connecting, Connected, Backoff}

func (s State) String() string {
	return [...]string{"pending", "connecting", "connected", "backoff"}[s]
}

// SubscriptionInfo describes a running subscription for the admin API;
// it carries no address.
type SubscriptionInfo struct {
	Family      string
	Namespace   string
	PublisherID uint64
	Component   string
	State       State
	Transport   string
	// Broker is the id of the broker whose session carries the
	// subscription's stream; "" for direct subscriptions and while no
	// stream is open.
	Broker string
	// Down is when the subscription last lost its session, or when it
	// started if it never had one; zero while a session is up. A host
	// ages subscriptions that stay down with it.
	Down time.Time
	// Replay reports that the publisher advertises a usable replay
	// socket; ReplayRefused that it advertises one the router refused
	// (the log says why).
	Replay        bool
	ReplayRefused bool
	// Parked: the session is connected and idle, parked with the poller
	// (no goroutine reads it until its publisher sends).
	Parked bool
}

type subKey struct {
	namespace string
	id        uint64
}

type subscription struct {
	target    Target
	transport string
	state     atomic.Uint32
	down      atomic.Int64 // unix ns; 0 while a session is up
	carrier   atomic.Pointer[string]
	cancel    context.CancelFunc
	done      chan struct{}

	// parked: the session is idle and parked with the poller; no
	// goroutine runs the subscription.
	parked atomic.Bool

	connMu sync.Mutex
	conn   net.Conn
	slot   *parkSlot // the live session's poller slot, nil if it does not park
	closed bool
}

// setSlot records the live session's poller slot so a stop can wake it.
func (s *subscription) setSlot(slot *parkSlot) {
	s.connMu.Lock()
	s.slot = slot
	s.connMu.Unlock()
}

// setConn records the live connection so a cancel can close it; it
// reports false (and closes conn) if the subscription was already stopped.
func (s *subscription) setConn(c net.Conn) bool {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conn = c
	return true
}

// stopped reports whether stop was called.
func (s *subscription) stopped() bool {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	return s.closed
}

func (s *subscription) stop() {
	s.cancel()
	s.connMu.Lock()
	s.closed = true
	if s.conn != nil {
		s.conn.Close() // unblocks a read in progress
	}
	slot := s.slot
	s.connMu.Unlock()
	if slot != nil {
		// A parked session has no read to unblock, and epoll does not
		// report a closed descriptor: resume it to see the close.
		slot.wake()
	}
}

// Supervisor runs one family's subscriptions and keeps them in line with
// the registry: a publisher that appears gets a subscription, one that
// departs or changes has its subscription cancelled.
type Supervisor struct {
	fam   Family
	clk   clock.Clock
	log   *slog.Logger
	count func(envelope.Result)

	mu      sync.Mutex
	policy  Policy
	subs    map[subKey]*subscription
	targets []Target
	logged  map[subKey]string // skip reasons already logged
	capped  bool
	rng     *rand.Rand
	// stateCh is poked whenever a subscription changes state or the set
	// of subscriptions changes (coverage reporting).
	stateCh chan struct{}
}

// NewSupervisor returns a supervisor with no subscriptions.
func NewSupervisor(fam Family, p Policy, clk clock.Clock, log *slog.Logger, count func(envelope.Result)) *Supervisor {
	if count == nil {
		count = func(envelope.Result) {}
	}
	return &Supervisor{fam: fam, policy: p, clk: clk, log: log, count: count,
		subs: map[subKey]*subscription{}, logged: map[subKey]string{},
		rng:     rand.New(rand.NewPCG(uint64(clk.Now().UnixNano()), 0x5eed)),
		stateCh: make(chan struct{}, 1)}
}

// StateChanged returns a channel that receives (coalesced) after a
// subscription changed state or subscriptions started or stopped. It has
// one consumer: the coverage reporter.
func (s *Supervisor) StateChanged() <-chan struct{} { return s.stateCh }

func (s *Supervisor) poke() {
	select {
	case s.stateCh <- struct{}{}:
	default:
	}
}

func (s *Supervisor) setState(sub *subscription, st State) {
	if State(sub.state.Swap(uint32(st))) != st {
		s.poke()
	}
}

// Reconcile follows a new registry snapshot with the whole subscription
// budget.
func (s *Supervisor) Reconcile(snap *discovery.Snapshot) {
	s.ReconcileWithin(snap, MaxSubscriptions)
}

// ReconcileWithin follows a new registry snapshot with at most limit
// subscriptions (at most MaxSubscriptions), admitted in ascending
// publisher id, and returns how many it runs. A host running several
// families reconciles them in turn, each within what the earlier ones
// left of MaxSubscriptions.
func (s *Supervisor) ReconcileWithin(snap *discovery.Snapshot, limit int) int {
	limit = min(max(limit, 0), MaxSubscriptions)
	targets, skips := Targets(snap, s.fam.Topic)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteSkips(skips)
	capped := len(targets) > limit
	if capped {
		if !s.capped {
			s.log.Warn("subscription cap reached; the publishers with the highest ids are not followed",
				"topic", s.fam.Topic, "publishers", len(targets), "limit", limit, "cap", MaxSubscriptions)
		}
		targets = targets[:limit]
	}
	s.capped = capped
	s.targets = targets
	s.apply(false)
	return len(targets)
}

// Target is the running subscription's target for a publisher: where a
// replay of what it missed can be asked for (ReplayEndpoint).
func (s *Supervisor) Target(namespace string, publisherID uint64) (Target, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[subKey{namespace, publisherID}]
	if !ok {
		return Target{}, false
	}
	return sub.target, true
}

// SetPolicy changes the dial policy and restarts every subscription under it.
func (s *Supervisor) SetPolicy(p Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policy = p
	s.apply(true)
}

// Stop cancels every subscription.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.targets = nil
	s.apply(false)
}

// apply starts and stops subscriptions to match s.targets; restart stops
// all of them first. Cancelled ones are stopped together and awaited for
// at most StopGrace.
func (s *Supervisor) apply(restart bool) {
	want := make(map[subKey]Target, len(s.targets))
	for _, t := range s.targets {
		want[subKey{t.Namespace, t.PublisherID}] = t
	}
	var stopping []*subscription
	var gone []subKey
	for k, sub := range s.subs {
		t, ok := want[k]
		if restart || !ok || t != sub.target {
			sub.stop()
			stopping = append(stopping, sub)
			delete(s.subs, k)
		}
		if !ok {
			gone = append(gone, k)
		}
	}
	s.await(stopping)
	if ss, ok := s.fam.Sink.(SessionSink); ok && len(gone) > 0 {
		sort.Slice(gone, func(i, j int) bool {
			if gone[i].namespace != gone[j].namespace {
				return gone[i].namespace < gone[j].namespace
			}
			return gone[i].id < gone[j].id
		})
		now := s.clk.Now()
		for _, k := range gone {
			ss.Unsubscribed(k.namespace, k.id, now)
		}
	}
	for k, t := range want {
		if _, ok := s.subs[k]; !ok {
			s.subs[k] = s.start(t)
		}
	}
	s.poke()
}

func (s *Supervisor) await(subs []*subscription) {
	if len(subs) == 0 {
		return
	}
	timer := s.clk.NewTimer(StopGrace)
	defer timer.Stop()
	for _, sub := range subs {
		select {
		case <-sub.done:
		case <-timer.C():
			s.log.Warn("subscriptions did not stop within the grace period; abandoning them", "topic", s.fam.Topic)
			return
		}
	}
}

func (s *Supervisor) noteSkips(skips []Skip) {
	seen := make(map[subKey]bool, len(skips))
	for _, sk := range skips {
		k := subKey{sk.Namespace, sk.PublisherID}
		seen[k] = true
		if s.logged[k] == sk.Reason {
			continue
		}
		s.logged[k] = sk.Reason
		s.count(sk.Result)
		s.log.Warn("event channel not followed", "topic", sk.Topic, "namespace", sk.Namespace,
			"publisher_id", sk.PublisherID, "result", sk.Result.String(), "reason", sk.Reason)
	}
	for k := range s.logged {
		if !seen[k] {
			delete(s.logged, k)
		}
	}
}

func (s *Supervisor) start(t Target) *subscription {
	ctx, cancel := context.WithCancel(context.Background())
	sub := &subscription{target: t, transport: s.policy.Transport, cancel: cancel, done: make(chan struct{})}
	now := s.clk.Now()
	sub.down.Store(now.UnixNano())
	if t.ReplayRefused != "" {
		s.log.Warn("publisher's replay endpoint refused; its missed messages cannot be asked for again",
			"topic", s.fam.Topic, "namespace", t.Namespace, "publisher_id", t.PublisherID, "reason", t.ReplayRefused)
	}
	if rs, ok := s.fam.Sink.(ReplaySessionSink); ok {
		rs.SubscribedReplay(t.Namespace, t.PublisherID, t.ReplayEndpoint != "", now)
	} else if ss, ok := s.fam.Sink.(SessionSink); ok {
		ss.Subscribed(t.Namespace, t.PublisherID, now)
	}
	seed := s.rng.Uint64()
	newRunner(s, ctx, sub, s.policy, rand.New(rand.NewPCG(seed, t.PublisherID))).start()
	return sub
}

// logSessionEnd warns about a session that failed. A publisher that
// closed an established session cleanly is no warning: a departing or
// restarting worker does that, usually just before its records leave
// etcd, and the redial's failure is warned about if it does not return.
func logSessionEnd(log *slog.Logger, err error, msg string, session time.Duration) {
	if session > 0 && errors.Is(err, io.EOF) {
		log.Info("subscription closed by its publisher; reconnecting", "session", session)
		return
	}
	log.Warn("subscription session ended", "error", msg, "session", session)
}

// errText renders an error without peer addresses for logs.
func errText(err error) string {
	var op *net.OpError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrNotAllowed):
		return ErrNotAllowed.Error()
	case errors.As(err, &op):
		return op.Op + ": " + op.Err.Error()
	}
	return err.Error()
}

// Subscriptions lists the running subscriptions, ordered by namespace and
// publisher id.
func (s *Supervisor) Subscriptions() []SubscriptionInfo {
	s.mu.Lock()
	out := make([]SubscriptionInfo, 0, len(s.subs))
	for _, sub := range s.subs {
		t := sub.target
		info := SubscriptionInfo{Family: s.fam.Topic, Namespace: t.Namespace, PublisherID: t.PublisherID,
			Component: t.Component, State: State(sub.state.Load()), Transport: sub.transport,
			Replay: t.ReplayEndpoint != "", ReplayRefused: t.ReplayRefused != "", Parked: sub.parked.Load()}
		if ns := sub.down.Load(); ns != 0 {
			info.Down = time.Unix(0, ns)
		}
		if id := sub.carrier.Load(); id != nil {
			info.Broker = *id
		}
		out = append(out, info)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].PublisherID < out[j].PublisherID
	})
	return out
}
