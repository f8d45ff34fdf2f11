package core

import (
	"slices"
	"time"

	"switchyard/router/events"
	"switchyard/router/kv"
)

// The kv-events staleness rule. The core follows each kv-events
// subscription's sessions through the host's inputs:
//
//   - KVSubscribed starts an episode without a session (the subscription
//     is new, or restarted under a new dial policy or address);
//   - KVConnected ends the episode; KVDisconnected starts a new one;
//   - at a Tick, a subscription that has been without a session for
//     KVStaleAfter loses its publisher's ranks, once per episode;
//   - KVUnsubscribed loses them at once: nobody follows the publisher.
//
// A Tick is recorded only when it acts (some subscription reached
// KVStaleAfter, whether or not its publisher had ranks left to clear, or
// a replica-sync time rule let something go); a
// tick that acts on nothing changes nothing, so a replay ticks exactly
// where the live process acted.

type publisherKey struct {
	namespace string
	id        uint64
}

// kvSession is one subscription's state: the start of its current time
// without a session (zero while it has one), and whether that episode
// already cleared the publisher.
type kvSession struct {
	down    time.Time
	cleared bool
}

func (c *Core) session(ns string, id uint64) *kvSession {
	k := publisherKey{ns, id}
	s := c.sessions[k]
	if s == nil {
		s = &kvSession{}
		c.sessions[k] = s
	}
	return s
}

// KVSubscribed reports a started (or restarted) kv-events subscription.
func (c *Core) KVSubscribed(ev events.KVSubscribed) {
	c.replaySubscribed(ev)
	c.record(ev)
	*c.session(ev.Namespace, ev.PublisherID) = kvSession{down: ev.At}
}

// KVConnected reports a (re)connected kv-events subscription. The index
// keeps each rank's event-id cursor, so events missed while disconnected
// show as a gap, which clears the rank.
func (c *Core) KVConnected(ev events.KVConnected) {
	c.record(ev)
	*c.session(ev.Namespace, ev.PublisherID) = kvSession{}
}

// KVDisconnected reports a kv-events subscription that lost its session.
func (c *Core) KVDisconnected(ev events.KVDisconnected) {
	c.record(ev)
	if s := c.session(ev.Namespace, ev.PublisherID); s.down.IsZero() {
		*s = kvSession{down: ev.At}
	}
}

// KVUnsubscribed reports a publisher nobody follows any more: its ranks
// are cleared at once. It returns how many were.
func (c *Core) KVUnsubscribed(ev events.KVUnsubscribed) int {
	c.record(ev)
	delete(c.sessions, publisherKey{ev.Namespace, ev.PublisherID})
	c.replayDrop(ev.At, publisherKey{ev.Namespace, ev.PublisherID}, true)
	n := c.lose(ev.At, ev.Namespace, ev.PublisherID)
	if n > 0 {
		c.log.Info("kv-events subscription stopped; its publisher's blocks were cleared",
			"namespace", ev.Namespace, "publisher_id", ev.PublisherID, "ranks_cleared", n)
	}
	return n
}

// Tick applies the time-driven rules at ev.At (this one, replica
// sync's, peers.go, and gap recovery's deadlines, kvreplay.go) and
// reports how many publishers lost their blocks. A tick that only ends
// recoveries is not recorded: the messages they release are.
func (c *Core) Tick(ev events.Tick) int {
	c.replayDue(ev.At)
	peers := c.peersDue(ev.At)
	var due []publisherKey
	for k, s := range c.sessions {
		if !s.down.IsZero() && !s.cleared && ev.At.Sub(s.down) >= c.staleAfter {
			due = append(due, k)
		}
	}
	if len(due) == 0 && !peers {
		return 0
	}
	slices.SortFunc(due, comparePublishers)
	c.record(ev)
	if peers {
		c.expirePeers(ev.At)
	}
	for _, k := range due {
		s := c.sessions[k]
		s.cleared = true
		c.replayDrop(ev.At, k, false)
		n := c.lose(ev.At, k.namespace, k.id)
		c.log.Warn("kv-events subscription without a session for too long; the blocks its publisher reported are no longer trusted",
			"namespace", k.namespace, "publisher_id", k.id, "down_for", ev.At.Sub(s.down).Round(time.Millisecond).String(),
			"ranks_cleared", n)
	}
	return len(due)
}

// KVPublisherLost clears the ranks a kv-events publisher reported: a
// kv_cache_index source's reset or loss (Shared.KVPublisherLost). It is
// also the input recordings made before the staleness rule moved into the
// core carry. Either way it is recorded as a kv-events row without frames
// and with result kv.PublisherLostResult, which replay applies.
func (c *Core) KVPublisherLost(ev events.KVPublisherLost) int {
	c.replayDrop(ev.At, publisherKey{ev.Namespace, ev.PublisherID}, false)
	return c.lose(ev.At, ev.Namespace, ev.PublisherID)
}

// lose clears a publisher's ranks. Only a call that cleared something
// changed the index, so only such a call is recorded: a kv-events output
// without frames and with result kv.PublisherLostResult.
func (c *Core) lose(at time.Time, ns string, id uint64) int {
	n := c.kv.PublisherLost(events.KVPublisherLost{At: at, Namespace: ns, PublisherID: id})
	if n > 0 {
		c.record(KVApplied{At: at, Namespace: ns, PublisherID: id, Result: kv.PublisherLostResult})
	}
	return n
}
