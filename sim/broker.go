package sim

import (
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"switchyard/router/bus/wire"
	"switchyard/router/discovery"
	"switchyard/router/events"
)

// The broker transport in virtual time. With router.load_transport:
// broker the simulated router's kv_metrics and kv-events subscriptions
// reach their publishers through the scenario's brokers instead of
// directly, following the rules router/eventplane's subscriptions follow
// over the event bus (docs/load.md, "The broker transport"):
//
//   - a subscription is placed on the live, non-draining broker session
//     covering its namespace that ranks highest by rendezvous hashing
//     (wire.Rendezvous, the listener's own placement);
//   - with no covering session it is pending; when one appears it waits a
//     further uniform draw in [0, PendingWakeJitter] (from a seeded stream
//     of its own) before it opens;
//   - when its carrier's session ends, the stream ends with it, and the
//     subscription opens again ReconnectFloor later, placed afresh (on
//     another covering broker, or pending);
//   - the core hears each kv-events subscription's sessions as usual
//     (KVDisconnected, KVConnected, the 60 s rule on its timer), and each
//     rank's event-id cursor is kept, so a removal missed meanwhile shows
//     as a gap that clears the rank.
//
// The simulator does not run router/eventplane's supervisor (its sessions
// are goroutines on sockets); it delivers frames to the core itself, as
// for the direct transport, and models the subscriptions' lives here with
// the supervisor's constants (a test keeps them equal).

// Broker transport timings, as router/eventplane's PendingWakeJitter,
// SessionLossGrace and BackoffInitial.
const (
	PendingWakeJitter = 500 * time.Millisecond
	SessionLossGrace  = 500 * time.Millisecond
	ReconnectFloor    = 500 * time.Millisecond
)

// Load transports (router.load_transport), as dynamo.load.transport.
const (
	TransportDirect = "direct"
	TransportBroker = "broker"
)

// Broker is one in-cluster broker of a scenario: its client id and the
// Dynamo namespaces its session covers. Every broker's session is live
// from the start of the run.
type Broker struct {
	ID         string   `yaml:"id"`
	Namespaces []string `yaml:"namespaces"`
}

// brokerSession is one broker's state in a run.
type brokerSession struct {
	id         string
	namespaces []string
	live       bool
	draining   bool
	// session numbers the broker's sessions; a stream opened on one ends
	// with it.
	session uint64
	// opened counts the streams placed here; carried those open now.
	opened, carried int
	// sessions counts the sessions welcomed.
	sessions int
}

func (b *brokerSession) covers(ns string) bool {
	return b.live && !b.draining && slices.Contains(b.namespaces, ns)
}

// relay is one subscription's life under the broker transport.
type relay struct {
	carrier *brokerSession // the broker whose session carries the stream
	session uint64
	opening bool
	waking  bool
	// pendingSince is when the subscription found no covering session
	// (zero while it is not pending); lostAt when its carrier's session
	// ended (zero once it has a session again).
	pendingSince time.Time
	lostAt       time.Time
}

// carries reports whether the stream a message left on (publisher id,
// carrier and its session) is still the subscription's.
func (p *publisher) carries(id uint64, carrier *brokerSession, session uint64) bool {
	return p.subscribed && p.id == id && p.relay.carrier == carrier && p.relay.session == session
}

// family is one of the router's subscription families.
type family int

const (
	famLoad family = iota
	famKV
)

func (f family) topic() string {
	if f == famKV {
		return discovery.TopicKVEvents
	}
	return discovery.TopicLoad
}

// BrokerSummary is what the broker transport did in a run.
type BrokerSummary struct {
	Brokers []BrokerStat `json:"brokers"`
	// Lost counts streams ended because their broker's session ended;
	// Replaced those of them whose subscription opened again (on another
	// broker, or the same one's new session).
	Lost     int `json:"lost"`
	Replaced int `json:"replaced"`
	// MaxOutage is the longest time from a stream's loss to its
	// subscription's next session.
	MaxOutage time.Duration `json:"max_outage_ns"`
	// Pending counts the times a subscription found no covering session;
	// PendingTime sums how long they waited (to their next session, or the
	// end of the run), MaxPending is the longest wait.
	Pending     int           `json:"pending"`
	PendingTime time.Duration `json:"pending_time_ns"`
	MaxPending  time.Duration `json:"max_pending_ns"`
	// StillPending counts subscriptions pending when the run ended.
	StillPending int `json:"still_pending"`
}

// BrokerStat is one broker's share.
type BrokerStat struct {
	ID string `json:"id"`
	// Sessions counts its sessions; Opened the streams placed on it;
	// Carried those open at the end of the run.
	Sessions int  `json:"sessions"`
	Opened   int  `json:"opened"`
	Carried  int  `json:"carried"`
	Live     bool `json:"live"`
}

// brokered reports whether the run's subscriptions go through brokers.
func (r *Run) brokered() bool { return r.brokers != nil }

// newBrokers starts every broker's first session.
func (r *Run) newBrokers() {
	if r.sc.Router.LoadTransport != TransportBroker {
		return
	}
	r.brokers = make([]*brokerSession, 0, len(r.sc.Brokers))
	for _, b := range r.sc.Brokers {
		r.brokers = append(r.brokers, &brokerSession{id: b.ID, namespaces: b.Namespaces, live: true, session: 1, sessions: 1})
	}
	r.brokerRand = rand.New(rand.NewPCG(r.sc.Seed, 0x62726b72))
	r.brokerSum = &BrokerSummary{}
}

func (r *Run) brokerByID(id string) *brokerSession {
	for _, b := range r.brokers {
		if b.id == id {
			return b
		}
	}
	return nil
}

func (r *Run) pubOf(w *worker, f family) *publisher {
	if f == famKV {
		return &w.kvPub
	}
	return &w.pub
}

// families are the subscriptions the router holds per worker.
func (r *Run) families() []family {
	if r.kvEnabled {
		return []family{famLoad, famKV}
	}
	return []family{famLoad}
}

// place is the broker a subscription to p opens on: the covering session
// ranking highest, ties to the smaller id; nil when none covers.
func (r *Run) place(p *publisher, f family) *brokerSession {
	host, port := splitEndpoint(p.endpoint)
	var best *brokerSession
	var bestW uint64
	for _, b := range r.brokers {
		if !b.covers(r.sc.Namespace) {
			continue
		}
		wt := wire.Rendezvous(r.sc.Namespace, host, port, f.topic(), b.id)
		if best == nil || wt > bestW || wt == bestW && b.id < best.id {
			best, bestW = b, wt
		}
	}
	return best
}

// splitEndpoint reads tcp://host:port.
func splitEndpoint(ep string) (string, uint16) {
	host, port, err := net.SplitHostPort(strings.TrimPrefix(ep, "tcp://"))
	if err != nil {
		return ep, 0
	}
	n, _ := strconv.ParseUint(port, 10, 16)
	return host, uint16(n)
}

// relaySubscribe opens the worker's subscriptions through the brokers.
func (r *Run) relaySubscribe(w *worker, now time.Time) {
	for _, f := range r.families() {
		r.open(w, f, now)
	}
}

// open places the subscription on a covering broker and connects after
// the subscribe delay, or leaves it pending.
func (r *Run) open(w *worker, f family, now time.Time) {
	p := r.pubOf(w, f)
	if p.subscribed || p.relay.opening || p.relay.waking || !w.alive || w.cut() || !w.followed {
		return
	}
	b := r.place(p, f)
	if b == nil {
		if p.relay.pendingSince.IsZero() {
			p.relay.pendingSince = now
			r.brokerSum.Pending++
		}
		return
	}
	p.relay.opening = true
	id, sess, gen := p.id, b.session, w.followGen
	r.loop.At(now.Add(r.sc.Network.SubscribeDelay.Std()), func(now time.Time) {
		p := r.pubOf(w, f)
		if p.id != id {
			return // a new incarnation subscribes itself
		}
		p.relay.opening = false
		if !w.alive || w.cut() || w.followGen != gen || f == famKV && !r.kvEnabled {
			return
		}
		if !b.live || b.session != sess {
			// The session ended before the stream opened.
			r.reopen(w, f, now)
			return
		}
		r.connected(w, f, b, now)
	})
}

// reopen opens the subscription again at the reconnect floor.
func (r *Run) reopen(w *worker, f family, now time.Time) {
	id := r.pubOf(w, f).id
	r.loop.At(now.Add(ReconnectFloor), func(at time.Time) {
		if r.pubOf(w, f).id == id {
			r.open(w, f, at)
		}
	})
}

// connected is the subscription's stream open on b: the core hears of
// the session.
func (r *Run) connected(w *worker, f family, b *brokerSession, now time.Time) {
	p := r.pubOf(w, f)
	r.endPending(p, now)
	if !p.relay.lostAt.IsZero() {
		r.brokerSum.Replaced++
		r.brokerSum.MaxOutage = max(r.brokerSum.MaxOutage, now.Sub(p.relay.lostAt))
		p.relay.lostAt = time.Time{}
	}
	p.subscribed = true
	p.relay.carrier, p.relay.session = b, b.session
	b.opened++
	b.carried++
	if f == famKV {
		r.cores.KVConnected(events.KVConnected{At: now, Namespace: r.sc.Namespace, PublisherID: p.id})
	} else {
		r.cores.LoadConnected(events.LoadConnected{At: now, Namespace: r.sc.Namespace, PublisherID: p.id})
	}
}

func (r *Run) endPending(p *publisher, now time.Time) {
	if p.relay.pendingSince.IsZero() {
		return
	}
	d := now.Sub(p.relay.pendingSince)
	r.brokerSum.PendingTime += d
	r.brokerSum.MaxPending = max(r.brokerSum.MaxPending, d)
	p.relay.pendingSince = time.Time{}
}

// release ends the worker's streams and forgets its subscriptions' broker
// state (the worker died, was cut off, or restarts its publishers); the
// caller tells the core of the kv-events session's end.
func (r *Run) release(w *worker, now time.Time) {
	if !r.brokered() {
		return
	}
	for _, f := range []family{famLoad, famKV} {
		r.releaseStream(r.pubOf(w, f), now)
	}
}

// releaseStream ends one subscription's stream and forgets its broker
// state.
func (r *Run) releaseStream(p *publisher, now time.Time) {
	if b := p.relay.carrier; b != nil {
		b.carried--
	}
	r.endPending(p, now)
	p.relay = relay{}
}

// endSession ends b's session: every stream it carries ends, and each
// subscription opens again at the reconnect floor (the session's end is
// seen at once, so no SessionLossGrace is waited).
func (r *Run) endSession(b *brokerSession, now time.Time) {
	b.live = false
	for _, w := range r.workers {
		for _, f := range r.families() {
			p := r.pubOf(w, f)
			if !p.subscribed || p.relay.carrier != b {
				continue
			}
			b.carried--
			p.relay.carrier = nil
			p.relay.lostAt = now
			r.brokerSum.Lost++
			if f == famKV {
				r.kvDisconnected(w, now)
			} else {
				p.subscribed = false
			}
			r.reopen(w, f, now)
		}
	}
}

// welcome starts a new session of b; pending subscriptions it covers wake
// after their jitter.
func (r *Run) welcome(b *brokerSession, now time.Time) {
	b.live, b.draining = true, false
	b.session++
	b.sessions++
	if !b.covers(r.sc.Namespace) {
		return
	}
	for _, w := range r.workers {
		for _, f := range r.families() {
			p := r.pubOf(w, f)
			if p.relay.pendingSince.IsZero() || p.relay.waking {
				continue
			}
			p.relay.waking = true
			id := p.id
			jitter := time.Duration(r.brokerRand.Int64N(int64(PendingWakeJitter) + 1))
			r.loop.At(now.Add(jitter), func(at time.Time) {
				p := r.pubOf(w, f)
				if p.id != id {
					return
				}
				p.relay.waking = false
				r.open(w, f, at)
			})
		}
	}
}

// injectBroker applies a broker fault.
func (r *Run) injectBroker(f Fault, now time.Time) {
	b := r.brokerByID(f.Broker)
	if b == nil {
		return
	}
	switch f.Kind {
	case FaultKillBroker:
		if b.live {
			r.endSession(b, now)
		}
	case FaultRestartBroker:
		if b.live {
			r.endSession(b, now)
		}
		r.welcome(b, now)
	case FaultDrainBroker:
		// Nothing new is placed on it; its streams keep running.
		b.draining = true
	}
}

// finishBrokers closes the broker summary at the end of the run.
func (r *Run) finishBrokers(now time.Time) {
	if !r.brokered() {
		return
	}
	s := r.brokerSum
	for _, w := range r.workers {
		for _, f := range r.families() {
			if p := r.pubOf(w, f); !p.relay.pendingSince.IsZero() {
				s.StillPending++
				r.endPending(p, now)
			}
		}
	}
	s.Brokers = s.Brokers[:0]
	for _, b := range r.brokers {
		s.Brokers = append(s.Brokers, BrokerStat{ID: b.id, Sessions: b.sessions, Opened: b.opened, Carried: b.carried, Live: b.live})
	}
	cp := *s
	r.summary.Brokers = &cp
}
