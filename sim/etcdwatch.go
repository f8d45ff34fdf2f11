package sim

import (
	"slices"
	"time"

	"switchyard/fakefleet/publish"
	"switchyard/fakefleet/registrar"
	"switchyard/router/discoverysource/etcdsource"
	"switchyard/router/events"
)

// The router's etcd watch, as router/discoverysource/etcdsource runs it:
// a pass range-gets the namespace (one DiscoveryResync), then watches from
// the next revision. When etcd goes away (etcd_restart) or the watch's
// revision is compacted (etcd_compaction) the pass ends; the registry keeps
// serving what it holds, changes in between reach nobody, and the next
// pass's range get replaces the namespace's records at once, so keys
// deleted meanwhile leave and new ones arrive. Under the Kubernetes
// sources none of this applies (validation refuses the etcd faults).

// outage is a time the router's watch was not open: from its break to the
// moment the next pass's range get answered.
type outage struct{ from, to time.Time }

// etcdWatch is the router's side of etcd discovery.
type etcdWatch struct {
	down bool
	// since is when the open outage began; relist when its range get
	// answers (moved later by an outage that overlaps it).
	since, relist time.Time
	// back is when etcd last came back from a restart: leases it held
	// were renewed then.
	back time.Time
	// closed are the outages that ended, at most one per fault.
	closed []outage
	// resyncs counts the relists after an outage.
	resyncs int
}

// lost reports whether a change written at written, due at the router at
// due, never reaches it through the watch: the watch broke before it came
// and the change is older than the range get that replaced the watch.
func (e *etcdWatch) lost(written, due time.Time) bool {
	if e.down && !due.Before(e.since) {
		return true
	}
	for _, o := range e.closed {
		if !due.Before(o.from) && written.Before(o.to) {
			return true
		}
	}
	return false
}

// viaWatch delivers a discovery change written at written to the router
// at due, unless an outage of the etcd watch loses it (the next relist
// then carries its effect). then runs after the change is applied.
func (r *Run) viaWatch(written, due time.Time, batch func(at time.Time) []events.Event, then func(at time.Time)) {
	r.loop.At(due, func(at time.Time) {
		if r.kube == nil && r.watch.lost(written, at) {
			return
		}
		r.discover(batch(at))
		if then != nil {
			then(at)
		}
	})
}

// watchBreaks ends the router's watch at now; the next pass reconnects at
// reconnect and its range get answers discovery_delay later. An outage
// that overlaps the open one only moves its end.
func (r *Run) watchBreaks(now, reconnect time.Time) {
	w := &r.watch
	if !w.down {
		w.down, w.since = true, now
	}
	at := reconnect.Add(r.sc.Network.DiscoveryDelay.Std())
	if !at.After(w.relist) {
		return
	}
	w.relist = at
	r.loop.At(at, func(now time.Time) {
		if !now.Equal(w.relist) || !w.down {
			return // a later outage moved the relist
		}
		w.down = false
		w.closed = append(w.closed, outage{from: w.since, to: now})
		w.resyncs++
		r.summary.Resyncs++
		r.relist(now)
	})
}

// etcdRestart is etcd away for d from now: the watch breaks, and leases
// that had not lapsed are renewed when etcd comes back, as etcd's lessor
// does when it is elected again (a dead worker's records stay one TTL
// longer).
func (r *Run) etcdRestart(now time.Time, d time.Duration) {
	back := now.Add(d)
	r.watch.back = later(r.watch.back, back)
	ttl := r.sc.Network.LeaseTTL.Std()
	for _, w := range r.workers {
		if !w.leaseEnds.IsZero() && w.leaseEnds.After(now) {
			w.leaseEnds = later(w.leaseEnds, back.Add(ttl))
		}
	}
	r.watchBreaks(now, back)
}

// etcdCompaction is the watch's revision compacted away: the pass ends at
// once and the next starts after the source's first reconnect backoff.
func (r *Run) etcdCompaction(now time.Time) {
	r.watchBreaks(now, now.Add(etcdsource.DefaultBackoffInitial))
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// inEtcd reports whether the worker's records are in etcd at t: it is
// registered and its lease, if it died, has not lapsed.
func (w *worker) inEtcd(t time.Time) bool {
	return w.registered && (w.leaseEnds.IsZero() || t.Before(w.leaseEnds))
}

// relist is the range get of a new pass answering at now: one resync of
// what etcd holds, and the router following exactly the publishers it
// names.
func (r *Run) relist(now time.Time) {
	var all []events.DiscoveryRecord
	for _, w := range r.workers {
		if w.inEtcd(now) {
			all = append(all, discoveryRecords(w.records)...)
		}
	}
	slices.SortFunc(all, func(a, b events.DiscoveryRecord) int { return compareKeys(a.Key, b.Key) })
	r.cores.Discovery([]events.Event{events.DiscoveryResync{At: now, Namespace: r.sc.Namespace, Records: all,
		Revision: int64(r.watch.resyncs + 1)}})
	for _, w := range r.workers {
		want := w.inEtcd(now)
		switch {
		case want && !w.followed:
			r.follow(w, now)
		case want && w.followedKV != w.kvPub.id:
			// A publisher restart the watch missed.
			r.unfollow(w, w.followedKV, now)
			r.follow(w, now)
		case !want && w.followed:
			r.unfollow(w, w.followedKV, now)
			r.dropSubscriptions(w, now)
		}
	}
}

// expireLease is a dead worker's lease lapsing: its records leave etcd at
// w.leaseEnds (later if etcd renewed the lease meanwhile) and the router
// sees the deletes discovery_delay after.
func (r *Run) expireLease(w *worker, keys []events.DiscoveryRecord, kvID uint64) {
	due := w.leaseEnds.Add(r.sc.Network.DiscoveryDelay.Std())
	r.loop.At(due, func(now time.Time) {
		if d := w.leaseEnds.Add(r.sc.Network.DiscoveryDelay.Std()); d.After(now) {
			r.expireLease(w, keys, kvID) // renewed by an etcd restart
			return
		}
		if r.watch.lost(w.leaseEnds, now) {
			return
		}
		batch := make([]events.Event, 0, len(keys))
		for i, kv := range keys {
			batch = append(batch, events.DiscoveryDelete{At: now, Namespace: r.sc.Namespace, Keyspace: kv.Keyspace, Key: kv.Key, Revision: int64(i + 2)})
		}
		r.cores.Discovery(batch)
		r.unfollow(w, kvID, now)
	})
}

// leaseExpiry is a living worker's lease lapsing (its keepalives failed):
// its records leave etcd now and the router, seeing the deletes, stops
// following its publishers; the worker serves on. After d (0: never) it
// registers again under a new lease, so with a new instance id.
func (r *Run) leaseExpiry(w *worker, now time.Time, d time.Duration) {
	if !w.registered {
		return
	}
	w.registered = false
	w.leaseGen++
	gen := w.leaseGen
	keys := discoveryRecords(w.records)
	delay := r.sc.Network.DiscoveryDelay.Std()
	r.viaWatch(now, now.Add(delay), func(at time.Time) []events.Event {
		batch := make([]events.Event, 0, len(keys))
		for _, kv := range keys {
			batch = append(batch, events.DiscoveryDelete{At: at, Namespace: r.sc.Namespace, Keyspace: kv.Keyspace, Key: kv.Key})
		}
		return batch
	}, func(at time.Time) {
		if w.followed {
			r.unfollow(w, w.followedKV, at)
			r.dropSubscriptions(w, at)
		}
	})
	if d <= 0 {
		return
	}
	r.loop.At(now.Add(d), func(now time.Time) {
		if !w.alive || w.registered || w.leaseGen != gen {
			return
		}
		w.registered = true
		w.id = r.ids.Uint64()>>1 | 1 // a new lease: Dynamo's instance id is the lease id
		w.records = registrar.Records(w.registrarWorker(), w.id)
		for _, rk := range w.ranks {
			rk.last = publish.Load{} // reported anew under the new identity
		}
		recs := discoveryRecords(w.records)
		r.viaWatch(now, now.Add(delay), func(at time.Time) []events.Event {
			batch := make([]events.Event, 0, len(recs))
			for _, kv := range recs {
				batch = append(batch, events.DiscoveryPut{At: at, Namespace: r.sc.Namespace, DiscoveryRecord: kv})
			}
			return batch
		}, func(at time.Time) {
			if !w.followed && w.inEtcd(at) {
				r.follow(w, at)
			}
		})
	})
}

// dropSubscriptions closes the router's subscriptions to a worker whose
// channels left discovery while it lives (the kv-events one is already
// unsubscribed).
func (r *Run) dropSubscriptions(w *worker, now time.Time) {
	r.release(w, now)
	w.pub.subscribed = false
	w.kvPub.subscribed = false
}
