package sim

import (
	"time"

	"switchyard/router/core"
	"switchyard/router/events"
)

// KV-event replay in the simulator. A worker group with kv_replay keeps
// each kv-events publisher's last Buffer messages in a ring, numbers and
// buffers them whether or not the router is subscribed (a PUB socket's
// publisher does not know), and answers the router's replay requests
// through the network model: the request reaches the publisher after the
// link's delay, and each buffered message from the request's first
// sequence to its last comes back after the link's delay again, in order
// on one connection, then the end. A link that is down when the request
// or a reply would cross it fails the replay (an end with an error);
// what the ring no longer holds is simply not sent. Delays draw from a
// stream of their own, so a run with replay sees the same losses as one
// without.

// replayRing is a publisher's last messages, oldest first.
type replayRing struct {
	seqs   []uint64
	frames [][][]byte
	start  int // index of the oldest
	n      int
}

func newReplayRing(size int) *replayRing {
	return &replayRing{seqs: make([]uint64, size), frames: make([][][]byte, size)}
}

// add keeps a published message, evicting the oldest when full.
func (g *replayRing) add(seq uint64, frames [][]byte) {
	i := (g.start + g.n) % len(g.seqs)
	if g.n == len(g.seqs) {
		g.start = (g.start + 1) % len(g.seqs)
	} else {
		g.n++
	}
	g.seqs[i], g.frames[i] = seq, frames
}

// between calls fn with each kept message numbered from..to, in order.
func (g *replayRing) between(from, to uint64, fn func(seq uint64, frames [][]byte)) {
	for k := range g.n {
		i := (g.start + k) % len(g.seqs)
		if s := g.seqs[i]; s >= from && s <= to {
			fn(s, g.frames[i])
		}
	}
}

// replayDelay is one crossing of the link to w's publisher.
func (r *Run) replayDelay(w *worker) time.Duration {
	n := r.sc.Network
	d := n.LoadDelay.Std()
	if j := n.LoadJitter.Std(); j > 0 {
		d += time.Duration(r.replayNet.Int64N(int64(j) + 1))
	}
	if w.degraded {
		d += w.degradeDelay
	}
	return d
}

// replayWanted is a router replica's core asking a publisher to replay
// (core.Hooks.KVReplayWanted). It answers that core alone, later: the
// hook runs inside the core's call.
func (r *Run) replayWanted(c *core.Core, want events.KVReplayWanted) {
	w := r.kvPublisher(want.PublisherID)
	end := func(at time.Time, errText string) {
		r.loop.At(at, func(now time.Time) {
			c.KVReplayEnd(events.KVReplayEnd{At: now, Namespace: want.Namespace, PublisherID: want.PublisherID, Err: errText})
		})
	}
	// The core's deadline acts at a tick, as a live host's ticker gives.
	r.loop.Background(want.At.Add(c.Settings().KVReplay.EffectiveTimeout()), func(now time.Time) { c.Tick(events.Tick{At: now}) })
	if w == nil || w.kvPub.ring == nil {
		end(want.At.Add(r.sc.Network.LoadDelay.Std()), "publisher offers no replay")
		return
	}
	gen := w.kvPub.id
	at := want.At.Add(r.replayDelay(w))
	r.loop.At(at, func(now time.Time) {
		if w.kvPub.id != gen || !w.alive {
			end(now.Add(r.replayDelay(w)), "publisher gone")
			return
		}
		if w.cut() {
			end(now, "link down")
			return
		}
		r.summary.ReplayRequests++
		tail := now
		w.kvPub.ring.between(want.From, want.To, func(seq uint64, frames [][]byte) {
			t := now.Add(r.replayDelay(w))
			if t.Before(tail) {
				t = tail // one connection: in order
			}
			tail = t
			r.loop.At(t, func(now time.Time) {
				if w.cut() {
					return // the end reports the failure
				}
				r.summary.ReplayMessages++
				c.KVReplayed(&events.KVReplayMessage{At: now, Namespace: want.Namespace, PublisherID: want.PublisherID, Frames: frames})
			})
		})
		done := now.Add(r.replayDelay(w))
		if done.Before(tail) {
			done = tail
		}
		r.loop.At(done, func(now time.Time) {
			errText := ""
			if w.cut() {
				errText = "link down"
			}
			c.KVReplayEnd(events.KVReplayEnd{At: now, Namespace: want.Namespace, PublisherID: want.PublisherID, Err: errText})
		})
	})
}

// kvPublisher is the worker whose current kv-events publisher has id.
func (r *Run) kvPublisher(id uint64) *worker {
	for _, w := range r.workers {
		if w.kvPub.id == id {
			return w
		}
	}
	return nil
}
