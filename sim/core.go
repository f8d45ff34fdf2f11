package sim

import (
	"io"
	"log/slog"
	"time"

	"switchyard/recorder"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/events"
	"switchyard/router/kv"
	"switchyard/router/load"
	"switchyard/router/picker"
)

// Tap receives every input the core applies and every decision it makes,
// in order. *recorder.Writer implements it; nil records nothing.
type Tap interface {
	Discovery(ev events.Event)
	Published(p recorder.Published)
	LoadConnected(ev events.LoadConnected)
	LoadMessage(ev *events.LoadMessage, result envelope.Result)
	KVConnected(namespace string, publisherID uint64, at time.Time)
	KVMessage(namespace string, publisherID uint64, frames [][]byte, at time.Time, result string)
	Request(r recorder.Request)
	Selection(s recorder.Selection)
	Ended(e recorder.Ended)
	Outcome(o recorder.Outcome)
}

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
	tap      Tap

	loadResults map[envelope.Result]uint64
	kvResults   map[string]uint64
	kvSelection map[string]uint64
	reasons     map[string]uint64
	cands       []picker.Candidate
}

// CoreOptions configure a core.
type CoreOptions struct {
	Picker       string
	Seed         uint64 // the random picker's seed
	MaxStaleness time.Duration
	KV           picker.KVOptions
	Tap          Tap
	Log          *slog.Logger
}

// NewCore assembles a core.
func NewCore(o CoreOptions) (*Core, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Core{registry: discovery.NewRegistry(), tap: o.Tap, loadResults: map[envelope.Result]uint64{},
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
	if c.tap != nil {
		c.tap.Discovery(ev)
	}
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
		if c.tap != nil {
			c.tap.Published(recorder.Published{At: at, Generation: gen, Workers: len(snap.Workers)})
		}
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
	if c.tap != nil {
		c.tap.LoadConnected(ev)
	}
	c.store.Connected(ev)
}

// LoadMessage applies one kv_metrics message.
func (c *Core) LoadMessage(ev *events.LoadMessage) envelope.Result {
	res := c.store.Apply(ev)
	if c.tap != nil {
		c.tap.LoadMessage(ev, res)
	}
	return res
}

// KVConnected reports a (re)connected kv-events subscription.
func (c *Core) KVConnected(ev events.KVConnected) {
	if c.tap != nil {
		c.tap.KVConnected(ev.Namespace, ev.PublisherID, ev.At)
	}
}

// KVMessage applies one kv-events message to the KV index.
func (c *Core) KVMessage(ev *events.KVMessage) string {
	res := c.kv.Apply(ev)
	if c.tap != nil {
		c.tap.KVMessage(ev.Namespace, ev.PublisherID, ev.Frames, ev.At, res)
	}
	return res
}

// KVPublisherLost clears the ranks a kv-events publisher reported (its
// subscription stayed down too long, or stopped). Only a call that
// cleared something changed the core, so only such a call is recorded: a
// kv-events row without frames and with result kv.PublisherLostResult.
func (c *Core) KVPublisherLost(ev events.KVPublisherLost) int {
	n := c.kv.PublisherLost(ev)
	if n > 0 && c.tap != nil {
		c.tap.KVMessage(ev.Namespace, ev.PublisherID, nil, ev.At, kv.PublisherLostResult)
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
	if c.tap != nil {
		c.tap.Request(recorder.Request{At: a.Req.Now, RequestID: a.Req.ID, Model: a.Req.Model, Namespaces: a.Req.Namespaces,
			PromptTokens: a.Req.PromptTokens, MaxTokens: a.Req.MaxTokens, Generation: snap.Generation, Tokens: a.Req.Tokens,
			Session: a.Session, Route: a.Req.Route})
	}
	sel, ok := c.picker.Pick(a.Req, snap)
	if c.tap != nil {
		c.cands = c.cands[:0]
		if ok && c.explain != nil {
			c.cands = c.explain.Candidates(c.cands)
		}
		c.tap.Selection(recorder.Selection{At: a.Req.Now, RequestID: a.Req.ID, OK: ok, Sel: sel, Candidates: c.cands})
	}
	return sel, ok
}

// Ended tells the picker a pinned request ended unserved.
func (c *Core) Ended(req picker.Request, sel picker.Selection, at time.Time, reason string) {
	if c.tap != nil {
		c.tap.Ended(recorder.Ended{At: at, RequestID: req.ID, Reason: reason})
	}
	c.picker.Ended(req, sel)
}

// Outcome records how a request ended; the core itself does not use it.
func (c *Core) Outcome(o recorder.Outcome) {
	if c.tap != nil {
		c.tap.Outcome(o)
	}
}

// WithoutTokens wraps a tap so requests are recorded without their token
// ids: a Mooncake-length prompt is about 48 KiB of ids.
func WithoutTokens(t Tap) Tap { return noTokens{t} }

type noTokens struct{ Tap }

func (n noTokens) Request(r recorder.Request) {
	r.Tokens = nil
	n.Tap.Request(r)
}
