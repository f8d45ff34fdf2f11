// Package core is the routing core: the discovery reducer and registry,
// the load store, the KV tracker and a picker, fed events and asked for
// picks, with no sockets, goroutines or wall clock of its own. Hosts drive
// it (the simulator, replay) and every input it applies and decision it
// makes leaves through one output Port.
package core

import (
	"io"
	"log/slog"
	"time"

	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/events"
	"switchyard/router/kv"
	"switchyard/router/load"
	"switchyard/router/picker"
)

// Core is the production routing core assembled for one single-threaded
// run: the discovery reducer and registry, the load store and a picker,
// exactly the objects the live router uses, fed events instead of
// sockets. The simulator drives it, and so does replay, which is why
// discovery is folded (ApplyDiscovery) and published (Publish) in two
// steps: a recording marks where each publish happened.
type Core struct {
	reducer  *discovery.Reducer
	registry *discovery.Registry
	store    *load.Store
	kv       *kv.Tracker
	picker   picker.Picker
	explain  picker.Explainer
	port     Port

	loadResults map[envelope.Result]uint64
	kvResults   map[string]uint64
	kvSelection map[string]uint64
	reasons     map[string]uint64
	cands       []picker.Candidate
}

// Options configure a core.
type Options struct {
	Picker       string
	Seed         uint64 // the random picker's seed
	MaxStaleness time.Duration
	KV           picker.KVOptions
	// Port receives every output in order; nil records nothing.
	Port Port
	Log  *slog.Logger
}

// New assembles a core.
func New(o Options) (*Core, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Core{registry: discovery.NewRegistry(), port: o.Port, loadResults: map[envelope.Result]uint64{},
		kvResults: map[string]uint64{}, kvSelection: map[string]uint64{}, reasons: map[string]uint64{}}
	c.reducer = discovery.NewReducer(log, nil)
	c.store = load.NewStore(func(r envelope.Result) { c.loadResults[r]++ })
	if o.MaxStaleness > 0 {
		c.store.SetMaxStaleness(o.MaxStaleness)
	}
	c.kv = kv.NewTracker(func(r string) { c.kvResults[r]++ })
	p, err := picker.New(o.Picker, picker.Deps{Store: c.store, Tracker: c.kv, Seed: o.Seed, KV: o.KV,
		Count:   func(role, reason string) { c.reasons[role+"/"+reason]++ },
		KVCount: func(r string) { c.kvSelection[r]++ }})
	if err != nil {
		return nil, err
	}
	c.picker = p
	c.explain, _ = p.(picker.Explainer)
	return c, nil
}

// Snapshot is the registry's current snapshot.
func (c *Core) Snapshot() *discovery.Snapshot { return c.registry.Snapshot() }

// Store is the load store.
func (c *Core) Store() *load.Store { return c.store }

// LoadResults counts kv_metrics messages by decode result.
func (c *Core) LoadResults() map[envelope.Result]uint64 { return c.loadResults }

// KVResults counts kv-events messages by result.
func (c *Core) KVResults() map[string]uint64 { return c.kvResults }

// KVSelections counts KV-aware selections by result.
func (c *Core) KVSelections() map[string]uint64 { return c.kvSelection }

// Reasons counts selections by "role/reason".
func (c *Core) Reasons() map[string]uint64 { return c.reasons }

// ApplyDiscovery folds one discovery event into the reducer; the registry
// does not move until Publish.
func (c *Core) ApplyDiscovery(ev events.Event) {
	c.record(ev)
	c.reducer.Apply(ev)
}

// Publish publishes the reducer's view; when the generation moves, the
// load store's admission gate follows at once and the publish is
// recorded. It returns the current generation.
func (c *Core) Publish(at time.Time) uint64 {
	gen, moved := c.registry.Publish(c.reducer.View(), at)
	if moved {
		snap := c.registry.Snapshot()
		c.store.SetLive(snap)
		c.kv.SetLive(snap)
		c.record(Published{At: at, Generation: gen, Workers: len(snap.Workers)})
	}
	return gen
}

// Discovery applies a batch as a watch response would, then publishes.
func (c *Core) Discovery(batch []events.Event) {
	if len(batch) == 0 {
		return
	}
	for _, ev := range batch {
		c.ApplyDiscovery(ev)
	}
	c.Publish(batch[len(batch)-1].Time())
}

// LoadConnected reports a (re)connected kv_metrics subscription.
func (c *Core) LoadConnected(ev events.LoadConnected) {
	c.record(ev)
	c.store.Connected(ev)
}

// LoadMessage applies one kv_metrics message.
func (c *Core) LoadMessage(ev *events.LoadMessage) envelope.Result {
	res := c.store.Apply(ev)
	c.record(LoadApplied{Msg: ev, Result: res})
	return res
}

// KVConnected reports a (re)connected kv-events subscription.
func (c *Core) KVConnected(ev events.KVConnected) {
	c.record(ev)
}

// KVMessage applies one kv-events message to the KV index.
func (c *Core) KVMessage(ev *events.KVMessage) string {
	res := c.kv.Apply(ev)
	c.record(KVApplied{At: ev.At, Namespace: ev.Namespace, PublisherID: ev.PublisherID, Frames: ev.Frames, Result: res})
	return res
}

// KVPublisherLost clears the ranks a kv-events publisher reported (its
// subscription stayed down too long, or stopped). Only a call that
// cleared something changed the core, so only such a call is recorded: a
// kv-events row without frames and with result kv.PublisherLostResult.
func (c *Core) KVPublisherLost(ev events.KVPublisherLost) int {
	n := c.kv.PublisherLost(ev)
	if n > 0 {
		c.record(KVApplied{At: ev.At, Namespace: ev.Namespace, PublisherID: ev.PublisherID, Result: kv.PublisherLostResult})
	}
	return n
}

// Arrival describes a request as it reaches the router.
type Arrival struct {
	Req     picker.Request
	Session uint64
}

// Pick records the request, asks the picker, and records the selection
// with its candidates.
func (c *Core) Pick(a Arrival) (picker.Selection, bool) {
	snap := c.registry.Snapshot()
	if c.port != nil {
		c.port.Record(Request{At: a.Req.Now, RequestID: a.Req.ID, Model: a.Req.Model, Namespaces: a.Req.Namespaces,
			PromptTokens: a.Req.PromptTokens, MaxTokens: a.Req.MaxTokens, Generation: snap.Generation, Tokens: a.Req.Tokens,
			Session: a.Session, Route: a.Req.Route})
	}
	sel, ok := c.picker.Pick(a.Req, snap)
	if c.port != nil {
		c.cands = c.cands[:0]
		if ok && c.explain != nil {
			c.cands = c.explain.Candidates(c.cands)
		}
		c.port.Record(Selection{At: a.Req.Now, RequestID: a.Req.ID, OK: ok, Sel: sel, Candidates: c.cands})
	}
	return sel, ok
}

// Ended tells the picker a pinned request ended unserved.
func (c *Core) Ended(req picker.Request, sel picker.Selection, at time.Time, reason string) {
	c.record(Ended{At: at, RequestID: req.ID, Reason: reason})
	c.picker.Ended(req, sel)
}

// Outcome records how a request ended; the core itself does not use it.
func (c *Core) Outcome(o Outcome) { c.record(o) }

// record hands one output to the port, if there is one.
func (c *Core) record(out Output) {
	if c.port != nil {
		c.port.Record(out)
	}
}
