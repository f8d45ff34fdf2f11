// Package core is the routing core: the discovery reducer and registry,
// the load store, the KV tracker, a picker and the rules that tie them
// together (a publish moves the admission gates, a pick charges the ranks
// it pinned, a kv-events publisher without a session for KVStaleAfter
// loses its blocks, a configuration change swaps the picker). It has no
// sockets, goroutines or clock of its own: hosts (the live server, the
// simulator, replay) turn what happens into its inputs, and every input it
// applies and decision it makes leaves through one output Port.
//
// A Core is not safe for concurrent use; a host with several goroutines
// serialises its calls (the live server holds one lock). The registry's
// snapshots, the load store and the KV tracker may be read from any
// goroutine.
package core

import (
	"cmp"
	"io"
	"log/slog"
	"time"

	"switchyard/router/active"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/events"
	"switchyard/router/kv"
	"switchyard/router/load"
	"switchyard/router/picker"
	"switchyard/router/replica"
)

// KVStaleAfter is how long a kv-events subscription may stay without a
// session before the blocks its publisher reported are cleared from the
// KV index: they may have been evicted since, and the router would credit
// cache hits that are not there.
const KVStaleAfter = 60 * time.Second

// Core is the routing core of one run, live or simulated.
type Core struct {
	follower *discovery.Follower
	store    *load.Store
	kv       *kv.Tracker
	// active is the core's own account of the requests it dispatched,
	// kept while tracking is on (picker.Tracking).
	active   *active.Set
	tracking picker.Tracking
	tracked  bool
	holds    []active.Hold
	picker   picker.Picker
	explain  picker.Explainer
	settings Settings
	seed     uint64
	hooks    Hooks
	port     Port
	log      *slog.Logger

	staleAfter time.Duration
	sessions   map[publisherKey]*kvSession
	// streams are the subscriptions whose publishers offer replay
	// (kvreplay.go).
	streams       map[publisherKey]*kvStream
	replayResults map[string]uint64
	// heldBytes is the frames every recovery holds; heldBytesCap its
	// bound (KVReplayMaxHeldBytesTotal; tests lower it).
	heldBytes, heldBytesCap int

	loadResults map[envelope.Result]uint64
	kvResults   map[string]uint64
	kvSelection map[string]uint64
	reasons     map[string]uint64
	// reasonKeys spells each role and reason pair's key in reasons once:
	// a pick would otherwise build it anew.
	reasonKeys map[[2]string]string
	cands      []picker.Candidate

	// peersAcct is the peer replicas' requests in the active account.
	peersAcct peerAccount
}

// Settings are the parts of the router's configuration the core applies:
// the initial ones come with Options, later ones as ConfigChanged inputs.
type Settings struct {
	Picker       string
	KV           picker.KVOptions
	MaxStaleness time.Duration // the load store's sample age limit; 0 keeps the default
	// KVStaleAfter replaces KVStaleAfter when set; operators cannot set
	// it, tests shorten it.
	KVStaleAfter time.Duration
	// PeerSilentAfter and PeerRequestTTL replace the replica-sync time
	// rules' defaults when set.
	PeerSilentAfter time.Duration
	PeerRequestTTL  time.Duration
	// KVReplay configures gap recovery by replay (kvreplay.go); its zero
	// value is off.
	KVReplay KVReplaySettings
}

// Hooks let a host observe what the core counts (the live server's
// Prometheus counters). Every hook may be nil; hooks run inside the
// core's calls and must not call back into it.
type Hooks struct {
	LoadResult    func(envelope.Result)
	KVResult      func(result string)
	Selection     func(role, reason string)
	KVSelection   func(result string)
	KVUnsupported func(model string, blockSize int)
	Discovery     func(kind string)
	// ActiveRefused hears of each request the active-sequence account
	// could not take (its bounds).
	ActiveRefused func()
	// Sync hears of every change to the replica's own requests in the
	// active account (added with its holds, first token, progress,
	// ended): what replica sync publishes to the peers. The event's
	// slices are valid only during the call.
	Sync func(replica.Event)
	// PeerGap hears of batches a peer sent that never arrived;
	// PeerRefused of peer events not applied, by reason (PeerStats).
	PeerGap     func(missing uint64)
	PeerRefused func(reason string, n uint64)
	// KVReplay hears of gap recovery by result (KVReplayResults), n at
	// a time. KVReplayWanted hears of each replay the core asks of a
	// publisher: the host sends the request and answers with
	// KVReplayed and KVReplayEnd, later, not from inside the hook.
	KVReplay       func(result string, n uint64)
	KVReplayWanted func(events.KVReplayWanted)
}

// Options configure a core.
type Options struct {
	Picker       string
	Seed         uint64 // the random picker's seed and the KV picker's sampling seed
	MaxStaleness time.Duration
	KV           picker.KVOptions
	// Port receives every output in order; nil records nothing.
	Port  Port
	Log   *slog.Logger
	Hooks Hooks
	// KVStaleAfter replaces KVStaleAfter when set (tests).
	KVStaleAfter time.Duration
	// PeerSilentAfter and PeerRequestTTL replace the replica-sync time
	// rules' defaults when set.
	PeerSilentAfter time.Duration
	PeerRequestTTL  time.Duration
	// KVReplay configures gap recovery by replay; its zero value is off.
	KVReplay KVReplaySettings
}

// New assembles a core.
func New(o Options) (*Core, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Core{port: o.Port, seed: o.Seed, hooks: o.Hooks, log: log,
		sessions: map[publisherKey]*kvSession{}, streams: map[publisherKey]*kvStream{}, replayResults: map[string]uint64{},
		heldBytesCap: KVReplayMaxHeldBytesTotal,
		loadResults:  map[envelope.Result]uint64{},
		kvResults:    map[string]uint64{}, kvSelection: map[string]uint64{}, reasons: map[string]uint64{},
		reasonKeys: map[[2]string]string{}}
	c.follower = discovery.NewFollower(discovery.NewReducer(log.With("component", "discovery"), o.Hooks.Discovery),
		discovery.NewRegistry())
	c.store = load.NewStore(c.countLoad)
	c.kv = kv.NewTracker(c.countKV)
	c.active = active.New()
	s := Settings{Picker: o.Picker, KV: o.KV, MaxStaleness: o.MaxStaleness, KVStaleAfter: o.KVStaleAfter,
		PeerSilentAfter: o.PeerSilentAfter, PeerRequestTTL: o.PeerRequestTTL, KVReplay: o.KVReplay}
	p, err := c.newPicker(s)
	if err != nil {
		return nil, err
	}
	c.install(p)
	c.apply(s)
	return c, nil
}

// apply installs the settings that are plain values.
func (c *Core) apply(s Settings) {
	c.settings = s
	c.store.SetMaxStaleness(cmp.Or(s.MaxStaleness, load.DefaultMaxStaleness))
	c.staleAfter = cmp.Or(s.KVStaleAfter, KVStaleAfter)
	c.tracking = s.KV.Track
	if t, ok := c.picker.(interface{ Tracking() picker.Tracking }); ok {
		c.tracking = t.Tracking()
	}
	was := c.tracked
	c.tracked = c.tracking.Any() || s.KV.DecodeActiveRequestWeight > 0
	if was && !c.tracked {
		// Switched off: what is held now would be stale if tracking came
		// back, since nothing reports these requests' ends to an account
		// that is not kept.
		c.active.Clear()
		c.clearPeerRequests()
	}
}

func (c *Core) newPicker(s Settings) (picker.Picker, error) {
	return picker.New(s.Picker, picker.Deps{Store: c.store, Tracker: c.kv, Seed: c.seed, KV: s.KV, Active: c.active,
		Count: c.countSelection, KVCount: c.countKVSelection, KVUnsupported: c.hooks.KVUnsupported})
}

func (c *Core) install(p picker.Picker) {
	c.picker = p
	c.explain, _ = p.(picker.Explainer)
}

// SetPort replaces the output port (nil records nothing from now on): a
// host stops recording before it closes its recorder.
func (c *Core) SetPort(p Port) { c.port = p }

// Registry is the registry the core publishes to. Its snapshots and its
// Changed channel may be read from any goroutine.
func (c *Core) Registry() *discovery.Registry { return c.follower.Registry }

// Snapshot is the registry's current snapshot.
func (c *Core) Snapshot() *discovery.Snapshot { return c.follower.Registry.Snapshot() }

// Store is the load store.
func (c *Core) Store() *load.Store { return c.store }

// Tracker is the KV tracker.
func (c *Core) Tracker() *kv.Tracker { return c.kv }

// Settings are the settings in force.
func (c *Core) Settings() Settings { return c.settings }

// LoadResults counts kv_metrics messages by decode result.
func (c *Core) LoadResults() map[envelope.Result]uint64 { return c.loadResults }

// KVResults counts kv-events messages by result.
func (c *Core) KVResults() map[string]uint64 { return c.kvResults }

// KVReplayCounts counts gap recovery by result (KVReplayResults).
func (c *Core) KVReplayCounts() map[string]uint64 { return c.replayResults }

// KVSelections counts KV-aware selections by result.
func (c *Core) KVSelections() map[string]uint64 { return c.kvSelection }

// Reasons counts selections by "role/reason".
func (c *Core) Reasons() map[string]uint64 { return c.reasons }

// ApplyDiscovery folds one discovery event into the reducer; the registry
// does not move until Publish.
func (c *Core) ApplyDiscovery(ev events.Event) {
	c.record(ev)
	c.follower.Reducer.Apply(ev)
}

// Publish publishes the reducer's view; when the generation moves, the
// load store's and the KV tracker's admission gates follow at once and
// the publish is recorded. It returns the current generation.
func (c *Core) Publish(at time.Time) uint64 {
	gen, moved := c.follower.Publish(at)
	if moved {
		snap := c.follower.Registry.Snapshot()
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

// KVMessage applies one kv-events message to the KV index, or, while
// its subscription recovers a gap by replay, holds it and returns KVHeld
// (kvreplay.go).
func (c *Core) KVMessage(ev *events.KVMessage) string {
	if c.settings.KVReplay.Enabled {
		k := publisherKey{ev.Namespace, ev.PublisherID}
		if st := c.streams[k]; st != nil {
			return c.receive(k, st, ev)
		}
	}
	return c.applyKV(ev, false)
}

// applyKV folds one message into the tracker and records it with its
// result; replayed marks a message a publisher replayed.
func (c *Core) applyKV(ev *events.KVMessage, replayed bool) string {
	res := c.kv.Apply(ev)
	c.record(KVApplied{At: ev.At, Namespace: ev.Namespace, PublisherID: ev.PublisherID, Frames: ev.Frames, Result: res,
		Replayed: replayed})
	return res
}

// Configure applies a configuration change: another picker replaces the
// current one (requests it pinned still end through the core, which keeps
// their dispatches), new KV settings reach the KV-aware picker's next
// pick, and a new sample age limit the load store. The change is recorded,
// so a replay applies it at the same point; a live host records its
// starting settings the same way, so its recording carries every setting
// the core ran with.
func (c *Core) Configure(ev ConfigChanged) error {
	next := ev.Settings
	if next.Picker != c.settings.Picker {
		p, err := c.newPicker(next)
		if err != nil {
			return err
		}
		c.install(p)
	} else if kp, ok := c.picker.(interface{ SetKVOptions(picker.KVOptions) }); ok {
		kp.SetKVOptions(next.KV)
	}
	was := c.settings.KVReplay.Enabled
	c.apply(next)
	c.record(ev)
	if was && !next.KVReplay.Enabled {
		c.replayStopAll(ev.At)
	}
	return nil
}

// Arrival describes a request as it reaches the router.
type Arrival struct {
	Req     picker.Request
	Session uint64
}

// Pick records the request, asks the picker, charges the ranks it pinned
// and records the selection with its candidates.
func (c *Core) Pick(a Arrival) (picker.Selection, bool) {
	snap := c.follower.Registry.Snapshot()
	if c.port != nil {
		c.port.Record(Request{At: a.Req.Now, RequestID: a.Req.ID, Model: a.Req.Model, Namespaces: a.Req.Namespaces,
			PromptTokens: a.Req.PromptTokens, MaxTokens: a.Req.MaxTokens, Generation: snap.Generation, Tokens: a.Req.Tokens,
			Session: a.Session, Route: a.Req.Route})
	}
	sel, ok := c.picker.Pick(a.Req, snap)
	if ok {
		picker.Dispatch(c.store, a.Req, sel)
		c.track(a.Req, sel)
	}
	if c.port != nil {
		c.cands = c.cands[:0]
		if ok && c.explain != nil {
			c.cands = c.explain.Candidates(c.cands)
		}
		c.port.Record(Selection{At: a.Req.Now, RequestID: a.Req.ID, OK: ok, Sel: sel, Candidates: c.cands})
	}
	return sel, ok
}

// EndedServed is the Ended reason of a request served to its end.
const EndedServed = "served"

// Ended reports that a pinned request ended. Unserved (refused, failed,
// cancelled), it no longer counts toward its ranks' stall but still
// toward their backlog, since the engine may still be running it; served
// (reason EndedServed), it leaves their backlog too. The reason is
// recorded, so a replay releases exactly what the live core did.
func (c *Core) Ended(req picker.Request, sel picker.Selection, at time.Time, reason string) {
	if c.port != nil { // guarded here: boxing the event allocates
		c.port.Record(Ended{At: at, RequestID: req.ID, Reason: reason})
	}
	if c.active.End(req.ID) {
		c.sync(replica.Event{Kind: replica.Ended, RequestID: req.ID})
	}
	if reason == EndedServed {
		picker.FinishDispatch(c.store, req, sel)
		return
	}
	picker.EndDispatch(c.store, req, sel)
}

// track charges a pinned request to its ranks in the active-sequence
// account, while tracking is on.
func (c *Core) track(req picker.Request, sel picker.Selection) {
	if !c.tracked {
		return
	}
	c.holds = picker.Holds(c.holds[:0], req, sel, c.tracking)
	if !c.active.Add(req.ID, c.holds...) {
		if c.hooks.ActiveRefused != nil {
			c.hooks.ActiveRefused()
		}
		return
	}
	c.sync(replica.Event{Kind: replica.Added, RequestID: req.ID, Holds: c.holds})
}

// sync hands a change to the replica's own requests to Hooks.Sync.
func (c *Core) sync(ev replica.Event) {
	if c.hooks.Sync != nil {
		c.hooks.Sync(ev)
	}
}

// FirstToken reports a pinned request's first output token: the rank
// that prefilled it has nothing left to prefill for it, and the prefill
// rank of a pair lets it go. Hosts report it for every request; it is
// recorded whether tracking is on or not, so a replay can turn it on.
func (c *Core) FirstToken(ev FirstToken) {
	if c.port != nil {
		c.port.Record(ev)
	}
	if c.active.FirstToken(ev.RequestID) {
		c.sync(replica.Event{Kind: replica.FirstToken, RequestID: ev.RequestID})
	}
}

// Progress reports a request's output so far, at block boundaries and
// only while TracksOutput: its predicted output blocks decay.
func (c *Core) Progress(ev Progress) {
	if c.port != nil {
		c.port.Record(ev)
	}
	if c.active.Progress(ev.RequestID, ev.OutputTokens) {
		c.sync(replica.Event{Kind: replica.Progress, RequestID: ev.RequestID, OutputTokens: ev.OutputTokens})
	}
}

// TracksOutput reports whether the core predicts output blocks, i.e.
// whether hosts report Progress.
func (c *Core) TracksOutput() bool { return c.tracked && c.tracking.OutputBlocks }

// Active is the core's account of the requests it dispatched.
func (c *Core) Active() *active.Set { return c.active }

// Outcome records how a request ended; the core itself does not use it.
func (c *Core) Outcome(o Outcome) {
	if c.port != nil {
		c.port.Record(o)
	}
}

// record hands one output to the port, if there is one.
func (c *Core) record(out Output) {
	if c.port != nil {
		c.port.Record(out)
	}
}

func (c *Core) countLoad(r envelope.Result) {
	c.loadResults[r]++
	if c.hooks.LoadResult != nil {
		c.hooks.LoadResult(r)
	}
}

func (c *Core) countKV(r string) {
	c.kvResults[r]++
	if c.hooks.KVResult != nil {
		c.hooks.KVResult(r)
	}
}

func (c *Core) countSelection(role, reason string) {
	key, ok := c.reasonKeys[[2]string{role, reason}]
	if !ok {
		key = role + "/" + reason
		c.reasonKeys[[2]string{role, reason}] = key
	}
	c.reasons[key]++
	if c.hooks.Selection != nil {
		c.hooks.Selection(role, reason)
	}
}

func (c *Core) countKVSelection(r string) {
	c.kvSelection[r]++
	if c.hooks.KVSelection != nil {
		c.hooks.KVSelection(r)
	}
}
