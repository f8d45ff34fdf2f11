package sim

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"switchyard/fakefleet/engine"
	"switchyard/fakefleet/publish"
	"switchyard/fakefleet/registrar"
	"switchyard/recorder"
	"switchyard/router/core"
	"switchyard/router/discovery"
	"switchyard/router/events"
	"switchyard/router/kv"
	"switchyard/router/picker"
	"switchyard/sim/workload"
)

// Epoch is where every simulated clock starts, so recordings carry the
// same timestamps run after run.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Observer sees a run's results as they happen, so a caller can aggregate
// without the run holding every request.
type Observer interface {
	// Arrived is called for each request as it reaches the router, with
	// its prompt's block hashes at the first fleet group's block size
	// (the base seed's, as the engines hash), computed once per request.
	Arrived(req *workload.Request, blocks *engine.PromptBlocks)
	// Finished is called once per request when it ends, served or not.
	Finished(r Result)
	// Load is called when a rank's KV blocks in use change (at publish).
	Load(at time.Duration, worker string, usedBlocks uint64)
}

// Result is one request's end.
type Result struct {
	ID           uint64
	Arrival      time.Duration
	PromptTokens int
	CachedTokens int
	OutputTokens int
	TTFT, E2E    time.Duration
	ITL          time.Duration // mean inter-token latency
	Status       string        // ok, refused, failed, rejected, cancelled
	Worker       string
	Reason       string
}

// Options configure a run beyond its scenario.
type Options struct {
	// Picker overrides the scenario's picker when set.
	Picker string
	// Record receives the core's outputs (a *recorder.Writer records the
	// run); nil records nothing.
	Record   core.Port
	Observer Observer
	// Source replaces the scenario's workload (replaying recorded requests).
	Source workload.Source
	// Progress is called with the number of requests ended so far.
	Progress func(ended int)
	Log      *slog.Logger
}

// Summary counts what a run did.
type Summary struct {
	Requests, Served, Failed, Refused int
	Events                            uint64 // loop events fired
	LoadMessages, KVMessages          uint64
	KVEvents                          uint64 // engine KV events (published or not)
	// LinkFailures counts the random link failures (network.link_failures).
	LinkFailures uint64        `json:",omitempty"`
	Virtual      time.Duration // simulated time covered
	// Resyncs counts the router's etcd relists after its watch broke
	// (etcd_restart, etcd_compaction); DegradeLost the messages degrade
	// lost.
	Resyncs     int    `json:",omitempty"`
	DegradeLost uint64 `json:",omitempty"`
	// Dropped counts the kv-events messages drop faults lost.
	Dropped uint64 `json:",omitempty"`
	// ReplayRequests counts the kv-events replay requests publishers
	// served (kv_replay), ReplayMessages the messages they replayed that
	// reached the router.
	ReplayRequests uint64 `json:",omitempty"`
	ReplayMessages uint64 `json:",omitempty"`
	// Brokers is what the broker transport did (router.load_transport:
	// broker only).
	Brokers *BrokerSummary `json:",omitempty"`
}

// Run is one simulation in progress.
type Run struct {
	sc   *Scenario
	opts Options
	loop *Loop
	// core is the first replica's core, the one a recording records;
	// cores are every replica's, which follow the same fleet.
	core     *core.Core
	cores    cores
	replicas []*routerReplica
	// next is the round robin's count of arrivals.
	next    int
	workers []*worker
	src     workload.Source
	// ids draws instance and publisher ids; net draws delays and losses.
	// Separate streams, so a network setting does not renumber the fleet.
	ids, net *rand.Rand
	// syncNet draws replica-sync losses; links the random link failures;
	// replayNet the delays of kv-events replays.
	syncNet, links, replayNet *rand.Rand

	namespaces []string
	kvEnabled  bool
	// kube is the fleet's Kubernetes objects under the Kubernetes
	// discovery sources; nil under etcd.
	kube      *kubeFleet
	inflight  map[uint64]*request
	summary   Summary
	kvEvents  uint64
	blockSize int

	// brokers are the scenario's brokers under the broker transport (nil
	// under the direct one); brokerRand draws the pending wake jitter.
	brokers    []*brokerSession
	brokerRand *rand.Rand
	brokerSum  *BrokerSummary

	// watch is the router's etcd watch (etcd_restart, etcd_compaction).
	watch etcdWatch
	// shim is the direct-mode shim's state (shim_slow, shim_fail).
	shim shimState
	// kvParams are the router.kv settings in force, as reloads left them.
	kvParams KVParams
}

// request is one request's journey.
type request struct {
	run     *Run
	core    *core.Core // the replica that routed it
	wr      workload.Request
	id      uint64
	arrival time.Time
	pr      picker.Request
	sel     picker.Selection
	decode  *worker
	prefill *worker
	drank   *rank
	prank   *rank

	first  time.Time
	out    int
	cached int
	ended  bool
	// blocks are the prompt's hashes at the run's block size, once asked for.
	blocks *engine.PromptBlocks
}

// New prepares a run of sc.
func New(sc *Scenario, opts Options) (*Run, error) {
	name := sc.Picker
	if opts.Picker != "" {
		name = opts.Picker
	}
	r := &Run{sc: sc, opts: opts, loop: NewLoop(Epoch), inflight: map[uint64]*request{},
		ids: rand.New(rand.NewPCG(sc.Seed, 0x6964)), net: rand.New(rand.NewPCG(sc.Seed, 0x6e6574)),
		links: rand.New(rand.NewPCG(sc.Seed, 0x6c696e6b)), replayNet: rand.New(rand.NewPCG(sc.Seed, 0x72706c79)),
		namespaces: []string{sc.Namespace}, kvEnabled: picker.IsKV(name), kvParams: sc.Router.KV}
	if err := r.newReplicas(name); err != nil {
		return nil, err
	}
	if sc.Discovery.Kubernetes() {
		r.kube = newKubeFleet(sc)
	}
	for gi := range sc.Fleet {
		g := &sc.Fleet[gi]
		cfg, err := g.rankConfig()
		if err != nil {
			return nil, fmt.Errorf("fleet[%d]: %w", gi, err)
		}
		for i := 0; i < g.Count; i++ {
			r.workers = append(r.workers, newWorker(r, len(r.workers), g, i, cfg))
		}
	}
	r.blockSize = sc.Fleet[0].BlockSize
	r.newBrokers()
	return r, nil
}

// PickerSeed derives the random picker's seed from a run's seed, so a
// replay draws the same numbers.
func PickerSeed(seed uint64) uint64 { return seed ^ 0x7069636b }

// WorkerIDs are the fleet's instance ids in declaration order (groups
// expanded), the order faults and expectations index workers by.
func (r *Run) WorkerIDs() []uint64 {
	ids := make([]uint64, len(r.workers))
	for i, w := range r.workers {
		ids[i] = w.id
	}
	return ids
}

// Core is the run's routing core.
func (r *Run) Core() *core.Core { return r.core }

// Execute runs the scenario to its end and reports what happened.
func (r *Run) Execute() (Summary, error) {
	src := r.opts.Source
	if src == nil {
		var closer io.Closer
		var err error
		if src, closer, err = r.sc.source(true); err != nil {
			return Summary{}, err
		}
		if closer != nil {
			defer closer.Close()
		}
	}
	r.src = src
	r.start()
	if u := r.sc.Until.Std(); u > 0 {
		r.loop.RunUntil(Epoch.Add(u))
	} else {
		r.loop.Run()
	}
	// Requests still pinned to a stalled worker never end on their own.
	r.cancelRemaining(r.loop.Clock.Now())
	r.summary.Events = r.loop.Fired()
	r.summary.KVEvents = r.kvEvents
	r.summary.Virtual = r.loop.Clock.Now().Sub(Epoch)
	r.finishBrokers(r.loop.Clock.Now())
	if ts, ok := src.(interface{ Err() error }); ok && ts.Err() != nil {
		return r.summary, fmt.Errorf("workload: %w", ts.Err())
	}
	return r.summary, nil
}

// start registers the fleet, schedules the faults and the first arrival.
func (r *Run) start() {
	t0 := r.loop.Clock.Now()
	seed := r.seedBatch()
	seedAt := t0.Add(r.sc.Network.DiscoveryDelay.Std())
	r.startReplicas(t0)
	r.viaWatch(t0, seedAt, seed, func(now time.Time) {
		for _, w := range r.workers {
			r.follow(w, now)
		}
	})
	if lf := r.sc.Network.LinkFailures; lf != nil && lf.MeanInterval > 0 {
		for _, w := range r.workers {
			r.nextLinkFailure(w, t0)
		}
	}
	for _, f := range r.sc.Faults {
		f := f
		if f.Kind.OfBroker() {
			r.loop.At(t0.Add(f.At.Std()), func(now time.Time) { r.injectBroker(f, now) })
			continue
		}
		if f.Kind.FleetWide() {
			r.loop.At(t0.Add(f.At.Std()), func(now time.Time) { r.injectFleet(f, now) })
			continue
		}
		r.loop.At(t0.Add(f.At.Std()), func(now time.Time) { r.inject(f, now) })
	}
	r.nextArrival()
}

// seedBatch returns the router's first view of the fleet: under etcd one
// resync of the records the workers hold now, under Kubernetes the list
// their objects make when the router reads them.
func (r *Run) seedBatch() func(now time.Time) []events.Event {
	if r.kube != nil {
		return func(now time.Time) []events.Event { return r.kube.seed(r.workers, now) }
	}
	var all []events.DiscoveryRecord
	for _, w := range r.workers {
		all = append(all, discoveryRecords(w.records)...)
	}
	slices.SortFunc(all, func(a, b events.DiscoveryRecord) int { return compareKeys(a.Key, b.Key) })
	return func(now time.Time) []events.Event {
		return []events.Event{events.DiscoveryResync{At: now, Namespace: r.sc.Namespace, Records: all, Revision: 1}}
	}
}

func compareKeys(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// follow is the router learning of the worker's current publishers from
// discovery: it starts following them (a kv-events subscription starts
// without a session) and connects after the subscribe delay.
func (r *Run) follow(w *worker, now time.Time) {
	w.followed, w.followedKV = true, w.kvPub.id
	if !r.channels() {
		return
	}
	if r.kvEnabled {
		r.cores.KVSubscribed(events.KVSubscribed{At: now, Namespace: r.sc.Namespace, PublisherID: w.kvPub.id,
			Replay: w.group.offersReplay()})
		r.staleTimer(now)
	}
	r.subscribe(w, now)
}

// channels reports whether discovery tells the router of the workers'
// event channels (not under the Pod source).
func (r *Run) channels() bool { return r.kube == nil || r.kube.channels() }

// discover hands the core a discovery batch, if there is one.
func (r *Run) discover(batch []events.Event) {
	if len(batch) > 0 {
		r.cores.Discovery(batch)
	}
}

// staleTimer runs the core's time rules when a kv-events subscription
// that lost its session at down has been without one for
// core.KVStaleAfter: the core's timer, as a live host's ticker.
func (r *Run) staleTimer(down time.Time) {
	r.loop.Background(down.Add(core.KVStaleAfter), func(now time.Time) {
		r.cores.Tick(events.Tick{At: now})
	})
}

// kvDisconnected ends the router's session with the worker's kv-events
// publisher, if it had one.
func (r *Run) kvDisconnected(w *worker, now time.Time) {
	if !w.kvPub.subscribed {
		return
	}
	w.kvPub.subscribed = false
	r.cores.KVDisconnected(events.KVDisconnected{At: now, Namespace: r.sc.Namespace, PublisherID: w.kvPub.id})
	r.staleTimer(now)
}

// subscribe connects the router to the worker's current publishers after
// the subscribe delay; messages published before then are lost.
func (r *Run) subscribe(w *worker, now time.Time) {
	if !r.channels() {
		return
	}
	if !w.followed {
		return // discovery no longer names its channels
	}
	if r.brokered() {
		r.relaySubscribe(w, now)
		return
	}
	id, kvID, gen := w.pub.id, w.kvPub.id, w.followGen
	r.loop.At(now.Add(r.sc.Network.SubscribeDelay.Std()), func(now time.Time) {
		if !w.alive || w.cut() || w.followGen != gen {
			return
		}
		if w.pub.id == id && !w.pub.subscribed {
			w.pub.subscribed = true
			r.cores.LoadConnected(events.LoadConnected{At: now, Namespace: r.sc.Namespace, PublisherID: id})
		}
		// The router follows kv-events only for the KV-aware picker, as a
		// live router does only with dynamo.kv.enabled.
		if r.kvEnabled && w.kvPub.id == kvID && !w.kvPub.subscribed {
			w.kvPub.subscribed = true
			r.cores.KVConnected(events.KVConnected{At: now, Namespace: r.sc.Namespace, PublisherID: kvID})
		}
	})
}

// deliverLoad sends a published message to the router across the
// simulated network: lost before the subscription, or by load_loss,
// otherwise delivered after load_delay plus jitter.
func (r *Run) deliverLoad(w *worker, frames [][]byte, now time.Time) {
	if !w.pub.subscribed {
		return
	}
	id, car, sess := w.pub.id, w.pub.relay.carrier, w.pub.relay.session
	r.deliver(w, &w.pub, now, func(at time.Time) {
		if w.cut() {
			return // lost in the network
		}
		if r.brokered() && !w.pub.carries(id, car, sess) {
			return // the stream carrying it ended
		}
		r.summary.LoadMessages++
		r.cores.LoadMessage(&events.LoadMessage{At: at, Namespace: r.sc.Namespace, PublisherID: id, Frames: frames})
	})
}

// deliverKV does the same for a kv-events message.
func (r *Run) deliverKV(w *worker, frames [][]byte, now time.Time) {
	if !w.kvPub.subscribed {
		return
	}
	if w.kvPub.drop > 0 {
		w.kvPub.drop--
		r.summary.Dropped++
		return
	}
	id, car, sess := w.kvPub.id, w.kvPub.relay.carrier, w.kvPub.relay.session
	r.deliver(w, &w.kvPub, now, func(at time.Time) {
		if w.cut() {
			return // lost in the network
		}
		if r.brokered() && !w.kvPub.carries(id, car, sess) {
			return // the stream carrying it ended
		}
		r.summary.KVMessages++
		r.cores.KVMessage(&events.KVMessage{At: at, Namespace: r.sc.Namespace, PublisherID: id, Frames: frames})
	})
}

// deliver schedules a message of p's stream across the simulated event
// plane, or loses it. While the worker's network is degraded the message
// is lost with the degrade's probability or delayed by its delay, and no
// later message of the stream overtakes it (one TCP connection: a slow
// link queues, it does not reorder).
func (r *Run) deliver(w *worker, p *publisher, now time.Time, arrive Action) {
	n := r.sc.Network
	loss := n.LoadLoss
	if n.KVLoss != nil && p == &w.kvPub {
		loss = *n.KVLoss
	}
	if loss > 0 && r.net.Float64() < loss {
		return
	}
	d := n.LoadDelay.Std()
	if j := n.LoadJitter.Std(); j > 0 {
		d += time.Duration(r.net.Int64N(int64(j) + 1))
	}
	at := now.Add(d)
	if w.degraded {
		if w.degradeLoss > 0 && r.net.Float64() < w.degradeLoss {
			r.summary.DegradeLost++
			return
		}
		at = at.Add(w.degradeDelay)
	}
	if at.Before(p.tail) {
		at = p.tail
	}
	p.tail = at
	r.loop.At(at, arrive)
}

func (r *Run) observeLoad(now time.Time, rk *rank, used uint64) {
	if r.opts.Observer == nil {
		return
	}
	label := rk.w.label
	if len(rk.w.ranks) > 1 {
		label = fmt.Sprintf("%s/r%d", label, rk.idx)
	}
	r.opts.Observer.Load(now.Sub(Epoch), label, used)
}

// nextArrival pulls the next request and schedules its arrival.
func (r *Run) nextArrival() {
	wr, ok := r.src.Next()
	if !ok {
		return
	}
	r.loop.At(Epoch.Add(r.sc.Warmup.Std()+wr.Arrival), func(now time.Time) {
		r.arrive(wr, now)
		r.nextArrival()
	})
}

// arrive is the router receiving a request: pick, then dispatch.
func (r *Run) arrive(wr workload.Request, now time.Time) {
	r.summary.Requests++
	q := &request{run: r, core: r.route(), wr: wr, id: wr.ID, arrival: now}
	// The simulator is a trusted internal caller: it hands the picker the
	// prompt's token ids, as prompt rendering will for live requests. Only
	// the KV-aware pickers and a recording read them, and a trace's prompts
	// are synthesized for a recording alone: the KV-aware pickers, the
	// engines and the statistics take the prompt's block hashes.
	var toks []uint32
	var blocks picker.BlockHasher
	switch {
	case r.opts.Record != nil:
		toks = q.wr.PromptTokens()
	case r.kvEnabled && q.wr.Tokens == nil && q.wr.Prompt != nil:
		blocks = q
	case r.kvEnabled:
		toks = q.wr.Tokens
	}
	q.pr = picker.Request{ID: wr.ID, Model: r.sc.Model, Namespaces: r.namespaces, PromptTokens: uint64(q.wr.PromptLen()),
		Tokens: toks, Blocks: blocks, MaxTokens: wr.MaxTokens, Route: "sim", Now: now}
	if r.opts.Observer != nil {
		r.opts.Observer.Arrived(&q.wr, q.promptBlocks())
	}
	sel, ok := q.core.Pick(core.Arrival{Req: q.pr, Session: wr.Session})
	if !ok {
		q.finish(now, "refused", "no worker serves the model")
		return
	}
	q.sel = sel
	q.decode, q.drank = r.lookup(sel.Decode)
	if sel.HasPrefill {
		q.prefill, q.prank = r.lookup(sel.Prefill)
	}
	r.inflight[q.id] = q
	q.hop(now, 0, q.dispatch)
}

// promptBlocks hashes the prompt at the run's block size, once.
func (q *request) promptBlocks() *engine.PromptBlocks {
	if q.blocks == nil {
		bs := q.run.blockSize
		local := q.wr.AppendBlockHashes(nil, bs, kv.BaseSeed)
		q.blocks = &engine.PromptBlocks{BlockSize: bs, Len: q.wr.PromptLen(), Local: local, Chained: kv.SequenceHashes(local)}
	}
	return q.blocks
}

// AppendBlockHashes hashes the prompt for a KV-aware picker: the hashes
// taken at arrival when the size and seed are theirs.
func (q *request) AppendBlockHashes(dst []uint64, blockSize int, seed uint64) []uint64 {
	if blockSize == q.run.blockSize && seed == kv.BaseSeed {
		return append(dst, q.promptBlocks().Local...)
	}
	return q.wr.AppendBlockHashes(dst, blockSize, seed)
}

func (r *Run) lookup(p picker.Pin) (*worker, *rank) {
	for _, w := range r.workers {
		if w.id == p.WorkerID {
			for _, rk := range w.ranks {
				if rk.idx == p.DPRank {
					return w, rk
				}
			}
			return w, nil
		}
	}
	return nil, nil
}

// dispatch sends the request to its first hop: the prefill worker of a
// disaggregated pair, else the decode (or aggregated) worker.
func (q *request) dispatch(now time.Time) {
	if q.prefill != nil {
		if !q.prefill.alive || q.prank == nil {
			q.fail(now, "prefill worker unreachable")
			return
		}
		if q.prefill.failing {
			q.fail(now, "prefill worker answered 500")
			return
		}
		// The prefill hop computes the prompt and one token, as the
		// frontend's max_tokens=1 prefill request does.
		q.prank.submit(&job{req: q, prefill: true}, 1, 0, now)
		return
	}
	q.toDecode(now)
}

func (q *request) toDecode(now time.Time) {
	if q.decode == nil || !q.decode.alive || q.drank == nil {
		q.fail(now, "decode worker unreachable")
		return
	}
	if q.decode.failing {
		q.fail(now, "decode worker answered 500")
		return
	}
	// After a prefill hop the prompt's KV arrives with the request.
	imported := 0
	if q.prefill != nil {
		imported = q.wr.PromptLen()
	}
	q.drank.submit(&job{req: q}, q.wr.MaxTokens, imported, now)
}

// output handles one engine output for the request's hop on rk.
func (q *request) output(rk *rank, j *job, o engine.Output, now time.Time) {
	if q.ended {
		return
	}
	if o.Rejected {
		// The core hears of the end before the outcome closes the
		// request (a replay reads nothing of a request after it).
		q.core.Ended(q.pr, q.sel, now, "rejected")
		q.finish(now, "rejected", o.Reason.String())
		return
	}
	if j.prefill {
		if o.FirstToken {
			q.cached = o.CachedTokens
		}
		if o.Finished {
			// The decode worker receives the prefill worker's KV first.
			q.hop(now, transferTime(q.decode, q.wr.PromptLen()), q.toDecode)
		}
		return
	}
	if o.FirstToken {
		q.first = now
		if q.prefill == nil {
			q.cached = o.CachedTokens
		}
		// The token the client sees first, as the live hosts report it
		// (after a prefill hop, the decode worker's).
		q.core.FirstToken(core.FirstToken{At: now, RequestID: q.id})
	}
	prev := q.out
	q.out += o.NewTokens
	q.progress(prev, now, o.Finished)
	if o.Finished {
		// As the live hosts do: a served request leaves its workers'
		// backlog at once, whether or not a sample follows; reported
		// before its outcome, which closes the request for a replay.
		q.core.Ended(q.pr, q.sel, now, core.EndedServed)
		q.finish(now, "ok", "")
	}
}

// progress reports the request's output to the core when it crosses a
// block boundary, only while the core predicts output blocks: one record
// per block, not per token, and none for the last block (its end follows).
func (q *request) progress(prev int, now time.Time, finished bool) {
	if finished || !q.core.TracksOutput() {
		return
	}
	bs := max(int(q.sel.BlockSize), 1)
	if q.out/bs > prev/bs {
		q.core.Progress(core.Progress{At: now, RequestID: q.id, OutputTokens: uint64(q.out)})
	}
}

// transferTime prices moving a prompt's KV to w, as engineworker does.
func transferTime(w *worker, tokens int) time.Duration {
	if w == nil || tokens <= 0 || w.group.KVTransferBandwidth <= 0 {
		return 0
	}
	g := w.group
	blocks := (tokens + g.BlockSize - 1) / g.BlockSize
	secs := float64(blocks) * float64(g.KVBytesPerBlock) / g.KVTransferBandwidth
	return time.Duration(secs * float64(time.Second) / g.SpeedupRatio)
}

// fail ends a pinned request unserved and tells the picker.
func (q *request) fail(now time.Time, why string) {
	if q.ended {
		return
	}
	// The end before the outcome, as for a served request.
	q.core.Ended(q.pr, q.sel, now, "failed")
	q.finish(now, "failed", why)
}

// finish records the request's outcome once.
func (q *request) finish(now time.Time, status, why string) {
	if q.ended {
		return
	}
	q.ended = true
	r := q.run
	delete(r.inflight, q.id)
	res := Result{ID: q.id, Arrival: q.arrival.Sub(Epoch), PromptTokens: q.wr.PromptLen(), CachedTokens: q.cached,
		OutputTokens: q.out, Status: status, Reason: q.sel.DecodeReason}
	if q.decode != nil {
		res.Worker = q.decode.label
	}
	if status == "ok" {
		res.TTFT, res.E2E = q.first.Sub(q.arrival), now.Sub(q.arrival)
		if q.out > 1 {
			res.ITL = (res.E2E - res.TTFT) / time.Duration(q.out-1)
		}
	}
	switch status {
	case "ok":
		r.summary.Served++
	case "refused":
		r.summary.Refused++
	default:
		r.summary.Failed++
	}
	q.core.Outcome(recorder.Outcome{At: now, RequestID: q.id, Status: status, Error: why, PromptTokens: res.PromptTokens,
		CachedTokens: res.CachedTokens, OutputTokens: res.OutputTokens, TTFT: res.TTFT, E2E: res.E2E, ITL: res.ITL})
	if r.opts.Observer != nil {
		r.opts.Observer.Finished(res)
	}
	if r.opts.Progress != nil {
		r.opts.Progress(r.summary.Served + r.summary.Failed + r.summary.Refused)
	}
}

// cancelRemaining ends requests still running when the run stops early.
func (r *Run) cancelRemaining(now time.Time) {
	ids := make([]uint64, 0, len(r.inflight))
	for id := range r.inflight {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		r.inflight[id].finish(now, "cancelled", "run ended")
	}
}

// inject applies one fault to a worker.
func (r *Run) inject(f Fault, now time.Time) {
	w := r.workers[f.Worker]
	if !w.alive {
		return
	}
	switch f.Kind {
	case FaultKill:
		w.alive = false
		w.failJobs(now, "worker died")
		r.kvDisconnected(w, now) // the connection closes with the process
		r.release(w, now)
		if r.kube != nil {
			r.killPod(w, now)
			return
		}
		if !w.registered {
			return // its lease lapsed already: nothing of it is in etcd
		}
		// The lease lapses one TTL on, or one TTL after etcd returns
		// when it is away now (it renews leases as it comes back).
		w.leaseEnds = now.Add(r.sc.Network.LeaseTTL.Std())
		if now.Before(r.watch.back) {
			w.leaseEnds = later(w.leaseEnds, r.watch.back.Add(r.sc.Network.LeaseTTL.Std()))
		}
		r.expireLease(w, discoveryRecords(w.records), w.kvPub.id)
	case FaultStall:
		if !w.stalled {
			w.stalled, w.stalledAt = true, now
			for _, rk := range w.ranks {
				rk.reschedule()
			}
		}
	case FaultResume:
		if w.stalled {
			w.stalled = false
			w.offset += now.Sub(w.stalledAt)
			for _, rk := range w.ranks {
				rk.reschedule()
				rk.changed(now)
			}
		}
	case FaultRestartPublisher:
		old := w.records
		oldKV := w.kvPub.id
		r.kvDisconnected(w, now) // the old socket closes
		r.release(w, now)
		w.newPublisher()
		w.records = registrar.Records(w.registrarWorker(), w.id)
		if r.kube != nil {
			r.rewriteMetadata(w, oldKV, now)
			return
		}
		for _, rk := range w.ranks {
			rk.last = publish.Load{} // a new publisher reports anew
		}
		if !w.registered {
			return // it registers again with its new channels
		}
		var batchKV []events.DiscoveryRecord
		var gone []events.DiscoveryRecord
		for _, kv := range discoveryRecords(w.records) {
			if string(old[kv.Key]) != string(kv.Value) {
				batchKV = append(batchKV, kv)
			}
		}
		for _, kv := range discoveryRecords(old) {
			if _, ok := w.records[kv.Key]; !ok {
				gone = append(gone, kv)
			}
		}
		r.viaWatch(now, now.Add(r.sc.Network.DiscoveryDelay.Std()), func(at time.Time) []events.Event {
			var batch []events.Event
			for _, kv := range batchKV {
				batch = append(batch, events.DiscoveryPut{At: at, Namespace: r.sc.Namespace, DiscoveryRecord: kv})
			}
			for _, kv := range gone {
				batch = append(batch, events.DiscoveryDelete{At: at, Namespace: r.sc.Namespace, Keyspace: kv.Keyspace, Key: kv.Key})
			}
			return batch
		}, func(at time.Time) {
			r.unfollow(w, oldKV, at)
			if w.alive {
				r.follow(w, at)
			}
		})
	case FaultGap:
		w.pub.seq++
		w.kvPub.seq++
	case FaultDrop:
		w.kvPub.drop += max(f.Count, 1)
	case FaultMalformed:
		w.pub.seq++
		frames := malformedFrames(w.pub.id, w.pub.seq)
		r.deliverLoad(w, frames, now)
	case FaultReset:
		w.failJobs(now, "engine reset")
		for _, rk := range w.ranks {
			rk.eng.Reset()
			rk.publishKV(now)
			rk.changed(now)
			rk.reschedule()
		}
	case FaultSlow:
		w.slow = f.Factor
		if w.slow == 0 {
			w.slow = 2
		}
	case FaultFail:
		w.failing = true
	case FaultRecover:
		w.failing, w.slow = false, 1
	case FaultMalformedRecord:
		if r.kube != nil {
			u := r.kube.malformed(w)
			r.loop.At(now.Add(r.sc.Network.DiscoveryDelay.Std()), func(at time.Time) { r.discover(r.kube.apply(u, at)) })
			return
		}
		if !w.registered {
			return // without a lease it writes nothing
		}
		key := fmt.Sprintf("v1/instances/%s/%s/generate/%x-malformed", r.sc.Namespace, w.component, w.id)
		w.records[key] = []byte("{not json")
		r.viaWatch(now, now.Add(r.sc.Network.DiscoveryDelay.Std()), func(at time.Time) []events.Event {
			return []events.Event{events.DiscoveryPut{At: at, Namespace: r.sc.Namespace,
				DiscoveryRecord: events.DiscoveryRecord{Keyspace: events.Instances, Key: key, Value: []byte("{not json")}}}
		}, nil)
	case FaultPartition:
		if !w.cut() {
			r.disconnect(w, now)
		}
		w.partitioned = true
	case FaultHeal:
		w.degraded, w.degradeDelay, w.degradeLoss = false, 0, 0
		if w.partitioned {
			w.partitioned = false
			if !w.cut() {
				r.subscribe(w, now)
			}
		}
	case FaultDegrade:
		w.degraded, w.degradeDelay, w.degradeLoss = true, f.Delay.Std(), f.Loss
	case FaultLeaseExpiry:
		r.leaseExpiry(w, now, f.Duration.Std())
	default:
		r.log().Warn("unknown fault", "kind", f.Kind)
	}
}

// disconnect breaks the router's connections to w's publishers: the
// kv_metrics subscription ends, the kv-events session ends, and a broker
// stream carrying either is released.
func (r *Run) disconnect(w *worker, now time.Time) {
	w.pub.subscribed = false
	r.kvDisconnected(w, now)
	r.release(w, now)
}

// nextLinkFailure schedules w's next random link failure after an
// exponential draw from the links stream (network.link_failures). Link
// failures are background events: they do not keep a finished run going.
func (r *Run) nextLinkFailure(w *worker, after time.Time) {
	lf := r.sc.Network.LinkFailures
	wait := time.Duration(r.links.ExpFloat64() * float64(lf.MeanInterval))
	r.loop.Background(after.Add(wait), func(now time.Time) {
		if w.alive && !w.cut() {
			w.linkDown = true
			r.summary.LinkFailures++
			r.disconnect(w, now)
			r.loop.Background(now.Add(lf.Outage.Std()), func(at time.Time) {
				w.linkDown = false
				if w.alive && !w.cut() {
					r.subscribe(w, at)
				}
			})
		}
		r.nextLinkFailure(w, now.Add(lf.Outage.Std()))
	})
}

// killPod is a killed worker leaving Kubernetes discovery: its Pod turns
// not ready after the readiness delay, and the router sees it after the
// discovery delay.
func (r *Run) killPod(w *worker, now time.Time) {
	kvID := w.kvPub.id
	r.loop.At(now.Add(r.sc.Discovery.ReadinessDelay.Std()+r.sc.Network.DiscoveryDelay.Std()), func(at time.Time) {
		r.discover(r.kube.notReady(w, at))
		r.unfollow(w, kvID, at)
	})
}

// rewriteMetadata is a publisher restart under Kubernetes discovery: the
// worker rewrites its DynamoWorkerMetadata with the new channels (the Pod
// source sees nothing), and the router follows the new publishers.
func (r *Run) rewriteMetadata(w *worker, oldKV uint64, now time.Time) {
	u := r.kube.rewritten(w)
	r.loop.At(now.Add(r.sc.Network.DiscoveryDelay.Std()), func(at time.Time) {
		r.discover(r.kube.apply(u, at))
		r.unfollow(w, oldKV, at)
		if w.alive {
			r.follow(w, at)
		}
	})
	for _, rk := range w.ranks {
		rk.last = publish.Load{} // a new publisher reports anew
	}
}

// unfollow is the router dropping a worker's channels that left
// discovery: its kv-events publisher kvID is unsubscribed.
func (r *Run) unfollow(w *worker, kvID uint64, at time.Time) {
	w.followed = false
	w.followGen++
	if r.kvEnabled && r.channels() {
		r.cores.KVUnsubscribed(events.KVUnsubscribed{At: at, Namespace: r.sc.Namespace, PublisherID: kvID})
	}
}

func (r *Run) log() *slog.Logger {
	if r.opts.Log != nil {
		return r.opts.Log
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// malformedFrames is a kv_metrics message whose frame header is invalid.
func malformedFrames(publisherID, seq uint64) [][]byte {
	pid, sq := make([]byte, 8), make([]byte, 8)
	binary.BigEndian.PutUint64(pid, publisherID)
	binary.BigEndian.PutUint64(sq, seq)
	return [][]byte{[]byte(discovery.TopicLoad), pid, sq, {0xff, 0, 0, 0, 1, 0xc1}}
}
