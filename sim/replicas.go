package sim

import (
	"math/rand/v2"
	"slices"
	"time"

	"switchyard/router/core"
	"switchyard/router/events"
	"switchyard/router/replica"
)

// Router replicas. A scenario's router.replicas runs several routing
// cores over one fleet, as several endpoint-picker replicas serve one
// pool: every core follows the same discovery, kv_metrics and kv-events
// inputs (each message is drawn once on the network and reaches every
// replica at the same moment), and each request goes to one replica,
// round robin in arrival order, as Envoy's default load balancing spreads
// ext_proc streams across the replicas. A replica's dispatch bookkeeping
// and active-sequence account hold only what it routed.
//
// With router.replica_sync each replica's changes to its own requests
// (Hooks.Sync) are batched as the live host batches them (a batch leaves
// when it holds replica.MaxEvents events or its first event has waited
// SyncBatchDelay; an idle replica sends an empty batch every
// SyncHeartbeat), encoded with replica.Append and, SyncDelay later, decoded
// by each peer with replica.Decode and handed to its core as a PeerBatch;
// each delivery to each peer is lost with probability SyncLoss. Every
// replica's core is ticked every second, as the live host's ticker does,
// so the replica-sync time rules run.
//
// Only the first replica's core records (Options.Record): its recording
// holds its own requests and the peer batches it applied, which is what a
// replay of it needs.

// Replica-sync timing, as router/replicasync's MaxBatchDelay and
// Heartbeat (a test keeps them equal) and the live server's tick.
const (
	SyncBatchDelay = time.Millisecond
	SyncHeartbeat  = time.Second
	TickEvery      = time.Second
)

// routerReplica is one router replica: its core and, with replica sync,
// the changes to its own requests waiting for their batch.
type routerReplica struct {
	idx    int
	id     uint64
	core   *core.Core
	outbox []replica.Event
	// open numbers the batch being filled: its flush timer acts only if
	// the batch it was set for is still the one waiting.
	open     uint64
	seq      uint64
	lastSend time.Time
	routed   int
	events   uint64
	lost     uint64
}

// ReplicaSummary is what one router replica did.
type ReplicaSummary struct {
	Replica int `json:"replica"`
	// Routed counts the requests this replica picked for.
	Routed int `json:"routed"`
	// Batches and Events count what it sent its peers (heartbeats
	// included); Lost the deliveries sync_loss dropped.
	Batches uint64 `json:"batches,omitempty"`
	Events  uint64 `json:"events,omitempty"`
	Lost    uint64 `json:"lost,omitempty"`
	// Peers is what its core did with its peers' batches.
	Peers *core.PeerStats `json:"peers,omitempty"`
}

// cores fans the fleet's inputs out to every replica's core, the first
// replica's first.
type cores []*core.Core

func (cs cores) Discovery(batch []events.Event) {
	for _, c := range cs {
		c.Discovery(batch)
	}
}

func (cs cores) Tick(ev events.Tick) {
	for _, c := range cs {
		c.Tick(ev)
	}
}

func (cs cores) LoadConnected(ev events.LoadConnected) {
	for _, c := range cs {
		c.LoadConnected(ev)
	}
}

func (cs cores) KVSubscribed(ev events.KVSubscribed) {
	for _, c := range cs {
		c.KVSubscribed(ev)
	}
}

func (cs cores) KVConnected(ev events.KVConnected) {
	for _, c := range cs {
		c.KVConnected(ev)
	}
}

func (cs cores) KVDisconnected(ev events.KVDisconnected) {
	for _, c := range cs {
		c.KVDisconnected(ev)
	}
}

func (cs cores) KVUnsubscribed(ev events.KVUnsubscribed) {
	for _, c := range cs {
		c.KVUnsubscribed(ev)
	}
}

// LoadMessage hands each core a message of its own over the same frames.
func (cs cores) LoadMessage(ev *events.LoadMessage) {
	for i, c := range cs {
		if i > 0 {
			cp := *ev
			ev = &cp
		}
		c.LoadMessage(ev)
	}
}

func (cs cores) KVMessage(ev *events.KVMessage) {
	for i, c := range cs {
		if i > 0 {
			cp := *ev
			ev = &cp
		}
		c.KVMessage(ev)
	}
}

// newReplicas assembles the scenario's router replicas.
func (r *Run) newReplicas(pickerName string) error {
	sc := r.sc
	n := sc.Router.ReplicaCount()
	for i := range n {
		rr := &routerReplica{idx: i, id: uint64(i + 1)}
		// Recovery is on, as the router's default; it acts only on
		// publishers that offer replay (kv_replay).
		o := core.Options{Picker: pickerName, Seed: PickerSeed(sc.Seed), MaxStaleness: sc.Router.MaxStaleness.Std(),
			KV: sc.Router.KV.Options(), Log: r.opts.Log, KVReplay: core.KVReplaySettings{Enabled: true}}
		o.Hooks.KVReplayWanted = func(want events.KVReplayWanted) { r.replayWanted(rr.core, want) }
		if i == 0 {
			o.Port = r.opts.Record
		}
		if sc.Router.ReplicaSync {
			o.Hooks.Sync = func(ev replica.Event) { r.syncEvent(rr, ev) }
		}
		c, err := core.New(o)
		if err != nil {
			return err
		}
		rr.core = c
		r.replicas = append(r.replicas, rr)
		r.cores = append(r.cores, c)
	}
	r.core = r.cores[0]
	if sc.Router.ReplicaSync {
		// Its own stream: the loss draws renumber neither the fleet nor
		// the network's.
		r.syncNet = rand.New(rand.NewPCG(sc.Seed, 0x73796e63))
	}
	return nil
}

// Cores are every replica's core, the first replica's first.
func (r *Run) Cores() []*core.Core { return slices.Clone(r.cores) }

// Replicas is what each router replica did.
func (r *Run) Replicas() []ReplicaSummary {
	out := make([]ReplicaSummary, len(r.replicas))
	for i, rr := range r.replicas {
		out[i] = ReplicaSummary{Replica: i, Routed: rr.routed, Batches: rr.seq, Events: rr.events, Lost: rr.lost}
		if r.sc.Router.ReplicaSync {
			st := rr.core.PeerStats()
			out[i].Peers = &st
		}
	}
	return out
}

// route chooses the replica a request reaches: round robin.
func (r *Run) route() *core.Core {
	rr := r.replicas[r.next%len(r.replicas)]
	r.next++
	rr.routed++
	return rr.core
}

// startReplicas starts each replica's heartbeat and ticker, with replica
// sync.
func (r *Run) startReplicas(t0 time.Time) {
	if !r.sc.Router.ReplicaSync {
		return
	}
	for _, rr := range r.replicas {
		rr.lastSend = t0
		r.heartbeat(rr, t0.Add(SyncHeartbeat))
		r.ticker(rr.core, t0.Add(TickEvery))
	}
}

// ticker runs a core's time rules every TickEvery (a tick that acts on
// nothing is not recorded).
func (r *Run) ticker(c *core.Core, at time.Time) {
	r.loop.Background(at, func(now time.Time) {
		c.Tick(events.Tick{At: now})
		r.ticker(c, now.Add(TickEvery))
	})
}

// heartbeat sends an empty batch when the replica has sent nothing for
// SyncHeartbeat.
func (r *Run) heartbeat(rr *routerReplica, at time.Time) {
	r.loop.Background(at, func(now time.Time) {
		if due := rr.lastSend.Add(SyncHeartbeat); now.Before(due) {
			r.heartbeat(rr, due)
			return
		}
		if len(rr.outbox) == 0 {
			r.flush(rr, now)
		}
		r.heartbeat(rr, now.Add(SyncHeartbeat))
	})
}

// syncEvent queues one change to a replica's own requests for its next
// batch; it runs inside the core's call and does not call back into it.
func (r *Run) syncEvent(rr *routerReplica, ev replica.Event) {
	ev.Holds = slices.Clone(ev.Holds)
	rr.outbox = append(rr.outbox, ev)
	now := r.loop.Clock.Now()
	if len(rr.outbox) >= replica.MaxEvents {
		r.flush(rr, now)
		return
	}
	if len(rr.outbox) == 1 {
		open := rr.open
		r.loop.Background(now.Add(SyncBatchDelay), func(at time.Time) {
			if rr.open == open && len(rr.outbox) > 0 {
				r.flush(rr, at)
			}
		})
	}
}

// flush sends the replica's waiting changes (none: a heartbeat) to every
// peer: encoded as the live host encodes them, decoded by each peer on
// arrival.
func (r *Run) flush(rr *routerReplica, now time.Time) {
	rr.open++
	rr.seq++
	rr.lastSend = now
	b := replica.Batch{Replica: rr.id, Seq: rr.seq, Events: rr.outbox}
	p, err := replica.Append(nil, &b)
	rr.events += uint64(len(rr.outbox))
	rr.outbox = rr.outbox[:0]
	if err != nil {
		r.log().Warn("replica sync: batch not encodable", "replica", rr.idx, "err", err)
		return
	}
	rs := r.sc.Router
	for _, peer := range r.replicas {
		if peer == rr {
			continue
		}
		if rs.SyncLoss > 0 && r.syncNet.Float64() < rs.SyncLoss {
			rr.lost++
			continue
		}
		r.loop.Background(now.Add(rs.SyncDelay.Std()), func(at time.Time) {
			var in replica.Batch
			if err := replica.Decode(p, &in); err != nil {
				r.log().Error("replica sync: a batch does not decode", "replica", rr.idx, "err", err)
				return
			}
			peer.core.PeerBatch(core.PeerBatch{At: at, Batch: in})
		})
	}
}
