package core

import (
	"cmp"
	"time"

	"switchyard/router/active"
	"switchyard/router/replica"
)

// Replica sync. Router replicas tell each other about the requests they
// dispatched (router/replica batches), and the core charges a peer's
// requests to the same active-sequence account as its own, so its picks
// see the load its peers put on each rank. A batch is an input
// (PeerBatch), recorded and replayed like any other; the time rules run at
// Tick:
//
//   - a peer's request whose end never arrives is let go PeerRequestTTL
//     after the last event about it (a lost Ended batch must not charge a
//     rank forever);
//   - a peer that sent nothing (not even its heartbeat) for
//     PeerSilentAfter is dropped with all its requests (it stopped, or the
//     link to it did).
//
// A peer request is tracked under an id of its own, PeerIDBase plus a
// counter, which no local request id reaches (the gateway counts from 1,
// the endpoint picker from 1<<62), keyed by the peer's replica id and its
// own request id. The account is bounded: MaxPeers replicas,
// MaxRequestsPerPeer requests each and MaxPeerRequests in all; what does
// not fit is refused and counted.

// Replica-sync time rules and bounds.
const (
	// PeerSilentAfter drops a peer that sent nothing for so long;
	// publishers send a heartbeat every second while idle.
	PeerSilentAfter = 10 * time.Second
	// PeerRequestTTL lets a peer's request go this long after the last
	// event about it.
	PeerRequestTTL = 10 * time.Minute
	// MaxPeers bounds the peer replicas followed at once.
	MaxPeers = 64
	// MaxRequestsPerPeer bounds one peer's requests.
	MaxRequestsPerPeer = 8192
	// MaxPeerRequests bounds every peer's requests together, leaving the
	// rest of active.MaxRequests to the replica's own.
	MaxPeerRequests = 32768
	// maxPeerHoldValue bounds a peer's token and block counts: anything
	// larger is not a real request, and running sums must not wrap.
	maxPeerHoldValue = 1 << 32
)

// PeerIDBase sets peer requests' ids in the active account apart from
// local ones.
const PeerIDBase = 1 << 63

// PeerBatch is one batch of a peer replica's events, as the host received
// it (Core.PeerBatch). The batch's slices are the caller's.
type PeerBatch struct {
	At    time.Time
	Batch replica.Batch
}

func (o PeerBatch) Time() time.Time { return o.At }

// PeerStats counts what replica sync did to the account.
type PeerStats struct {
	Peers    int    // peers followed now
	Requests int    // peer requests tracked now
	Batches  uint64 // batches applied
	Events   uint64 // events applied
	Gaps     uint64 // batches missing between two a peer sent
	Expired  uint64 // peer requests let go by PeerRequestTTL
	Dropped  uint64 // peers dropped by PeerSilentAfter
	// Refused counts events not applied, by reason: too_many_peers,
	// peer_full, duplicate, unknown (an event about a request never
	// added, or already let go), implausible, refused (the account's own
	// bounds), untracked (tracking is off).
	Refused map[string]uint64
}

type peerState struct {
	seen time.Time
	seq  uint64
	reqs map[uint64]*peerRequest
}

type peerRequest struct {
	id   uint64 // the id in the active account
	seen time.Time
}

// peerAccount is the core's replica-sync state.
type peerAccount struct {
	peers  map[uint64]*peerState
	n      int
	nextID uint64
	stats  PeerStats
	holds  [replica.MaxHolds]active.Hold
}

func (c *Core) peerSilentAfter() time.Duration {
	return cmp.Or(c.settings.PeerSilentAfter, PeerSilentAfter)
}

func (c *Core) peerRequestTTL() time.Duration {
	return cmp.Or(c.settings.PeerRequestTTL, PeerRequestTTL)
}

// PeerBatch applies one batch of a peer replica's events to the active
// account. The simulator drives replica sync by handing each replica's
// core the batches its peers' Hooks.Sync produced; hosts must not hand a
// replica its own batches.
func (c *Core) PeerBatch(ev PeerBatch) {
	c.record(ev)
	a := &c.peersAcct
	b := &ev.Batch
	p := a.peers[b.Replica]
	if p == nil {
		if len(a.peers) >= MaxPeers {
			c.refusePeer("too_many_peers", uint64(len(b.Events)))
			return
		}
		p = &peerState{reqs: map[uint64]*peerRequest{}}
		if a.peers == nil {
			a.peers = map[uint64]*peerState{}
		}
		a.peers[b.Replica] = p
		c.log.Info("replica sync: following a peer replica", "replica", b.Replica)
	} else if b.Seq > p.seq+1 {
		a.stats.Gaps += b.Seq - p.seq - 1
		if c.hooks.PeerGap != nil {
			c.hooks.PeerGap(b.Seq - p.seq - 1)
		}
	}
	p.seq, p.seen = b.Seq, ev.At
	a.stats.Batches++
	for i := range b.Events {
		c.peerEvent(p, &b.Events[i], ev.At)
	}
}

func (c *Core) peerEvent(p *peerState, ev *replica.Event, at time.Time) {
	a := &c.peersAcct
	if ev.Kind == replica.Added {
		switch {
		case !c.tracked:
			c.refusePeer("untracked", 1)
		case p.reqs[ev.RequestID] != nil:
			c.refusePeer("duplicate", 1)
		case len(p.reqs) >= MaxRequestsPerPeer || a.n >= MaxPeerRequests:
			c.refusePeer("peer_full", 1)
		case len(ev.Holds) == 0 || len(ev.Holds) > replica.MaxHolds:
			c.refusePeer("implausible", 1)
		default:
			holds := a.holds[:0]
			for _, h := range ev.Holds {
				if h.PrefillTokens > maxPeerHoldValue || h.Blocks > maxPeerHoldValue || h.OutputTokens > maxPeerHoldValue || h.BlockSize > maxPeerHoldValue {
					c.refusePeer("implausible", 1)
					return
				}
				if !c.tracking.OutputBlocks {
					h.OutputTokens, h.BlockSize = 0, 0
				}
				holds = append(holds, h)
			}
			id := PeerIDBase | a.nextID
			if !c.active.Add(id, holds...) {
				c.refusePeer("refused", 1)
				return
			}
			a.nextID++
			p.reqs[ev.RequestID] = &peerRequest{id: id, seen: at}
			a.n++
			a.stats.Events++
		}
		return
	}
	r := p.reqs[ev.RequestID]
	if r == nil {
		c.refusePeer("unknown", 1)
		return
	}
	r.seen = at
	a.stats.Events++
	switch ev.Kind {
	case replica.FirstToken:
		c.active.FirstToken(r.id)
	case replica.Progress:
		c.active.Progress(r.id, ev.OutputTokens)
	case replica.Ended:
		c.active.End(r.id)
		delete(p.reqs, ev.RequestID)
		a.n--
	}
}

func (c *Core) refusePeer(reason string, n uint64) {
	a := &c.peersAcct
	if a.stats.Refused == nil {
		a.stats.Refused = map[string]uint64{}
	}
	a.stats.Refused[reason] += n
	if c.hooks.PeerRefused != nil {
		c.hooks.PeerRefused(reason, n)
	}
}

// peersDue reports whether the replica-sync time rules act at now.
func (c *Core) peersDue(now time.Time) bool {
	silent, ttl := c.peerSilentAfter(), c.peerRequestTTL()
	for _, p := range c.peersAcct.peers {
		if now.Sub(p.seen) >= silent {
			return true
		}
		for _, r := range p.reqs {
			if now.Sub(r.seen) >= ttl {
				return true
			}
		}
	}
	return false
}

// expirePeers applies the replica-sync time rules at now. Releases add
// and subtract running sums, so the order they happen in changes nothing.
func (c *Core) expirePeers(now time.Time) {
	a := &c.peersAcct
	silent, ttl := c.peerSilentAfter(), c.peerRequestTTL()
	for id, p := range a.peers {
		if now.Sub(p.seen) >= silent {
			for _, r := range p.reqs {
				c.active.End(r.id)
			}
			a.n -= len(p.reqs)
			delete(a.peers, id)
			a.stats.Dropped++
			c.log.Warn("replica sync: a peer replica went silent; its requests no longer count",
				"replica", id, "silent_for", now.Sub(p.seen).Round(time.Millisecond).String(), "requests", len(p.reqs))
			continue
		}
		for rid, r := range p.reqs {
			if now.Sub(r.seen) >= ttl {
				c.active.End(r.id)
				delete(p.reqs, rid)
				a.n--
				a.stats.Expired++
			}
		}
	}
}

// clearPeerRequests forgets every peer request (the active account was
// cleared); the peers stay followed.
func (c *Core) clearPeerRequests() {
	a := &c.peersAcct
	for _, p := range a.peers {
		clear(p.reqs)
	}
	a.n = 0
}

// PeerStats is what replica sync did so far; Refused is a copy.
func (c *Core) PeerStats() PeerStats {
	s := c.peersAcct.stats
	s.Peers, s.Requests = len(c.peersAcct.peers), c.peersAcct.n
	refused := make(map[string]uint64, len(s.Refused))
	for k, v := range s.Refused {
		refused[k] = v
	}
	s.Refused = refused
	return s
}
