package sim

import (
	"reflect"
	"time"

	"switchyard/router/core"
	"switchyard/router/events"
	"switchyard/router/picker"
)

// shimState is the dynamo.frontend --router-mode direct shim between the
// router and the workers, which every request hop crosses
// (network.request_delay).
type shimState struct {
	// delay is added to every hop (shim_slow); failing makes the shim
	// answer every request with a 5xx (shim_fail).
	delay   time.Duration
	failing bool
}

// ShimFailure is the outcome's error of a request the shim refused.
const ShimFailure = "direct-mode shim answered 500"

// hop sends the request through the shim to its next worker: it arrives
// extra + request_delay (+ shim_slow's delay) from now, or, while the shim
// fails, the shim answers 500 after request_delay and the request ends
// unserved without reaching a worker.
func (q *request) hop(now time.Time, extra time.Duration, next Action) {
	r := q.run
	d := r.sc.Network.RequestDelay.Std()
	if r.shim.failing {
		r.loop.At(now.Add(extra+d), func(at time.Time) { q.fail(at, ShimFailure) })
		return
	}
	r.loop.At(now.Add(extra+d+r.shim.delay), next)
}

// injectFleet applies a fault of the router's surroundings: etcd, the
// shim, or the router's own configuration.
func (r *Run) injectFleet(f Fault, now time.Time) {
	switch f.Kind {
	case FaultEtcdRestart:
		r.etcdRestart(now, f.Duration.Std())
	case FaultEtcdCompaction:
		r.etcdCompaction(now)
	case FaultShimSlow:
		r.shim.delay = f.Delay.Std()
	case FaultShimFail:
		r.shim.failing = true
	case FaultShimRecover:
		r.shim = shimState{}
	case FaultReload:
		r.reload(f.Router, now)
	default:
		r.log().Warn("unknown fault", "kind", f.Kind)
	}
}

// reload hands every replica's core the settings a changed configuration
// file asks for, merged over those in force, as the live server does: a
// change of nothing is not applied. A run whose picker the caller chose
// (a counterfactual) keeps it; the other settings change as they did.
// Turning KV-aware selection on or off starts or stops the kv-events
// subscriptions.
func (r *Run) reload(p *ReloadParams, now time.Time) {
	if p == nil {
		return
	}
	next := r.core.Settings()
	if p.Picker != "" && (r.opts.Picker == "" || r.opts.Picker == r.sc.Picker) {
		next.Picker = p.Picker
	}
	if p.MaxStaleness != nil {
		next.MaxStaleness = p.MaxStaleness.Std()
	}
	if p.KV != nil {
		r.kvParams = p.KV.Over(r.kvParams)
		next.KV = r.kvParams.Options()
	}
	if reflect.DeepEqual(next, r.core.Settings()) {
		return
	}
	for i, c := range r.cores {
		if err := c.Configure(core.ConfigChanged{At: now, Settings: next}); err != nil {
			r.log().Error("reload not applied", "replica", i, "err", err) // not reached: validation knows the pickers
			return
		}
	}
	r.setKV(picker.IsKV(next.Picker), now)
}

// setKV starts or stops the router's kv-events subscriptions to every
// worker whose channels it follows.
func (r *Run) setKV(on bool, now time.Time) {
	if on == r.kvEnabled {
		return
	}
	r.kvEnabled = on
	if !r.channels() {
		return
	}
	for _, w := range r.workers {
		if !w.followed {
			continue
		}
		id := w.kvPub.id
		if on {
			r.cores.KVSubscribed(events.KVSubscribed{At: now, Namespace: r.sc.Namespace, PublisherID: id, Replay: w.group.offersReplay()})
			r.staleTimer(now)
			r.subscribe(w, now)
			continue
		}
		if r.brokered() {
			r.releaseStream(&w.kvPub, now)
		}
		w.kvPub.subscribed = false
		r.cores.KVUnsubscribed(events.KVUnsubscribed{At: now, Namespace: r.sc.Namespace, PublisherID: id})
	}
}
