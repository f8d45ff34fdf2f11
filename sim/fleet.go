package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"switchyard/fakefleet/engine"
	"switchyard/fakefleet/publish"
	"switchyard/fakefleet/registrar"
	"switchyard/fakefleet/wire"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource/k8ssource"
	"switchyard/router/events"
)

// worker is one simulated Dynamo worker: its discovery records, a
// kv_metrics publisher and one engine per data-parallel rank. It does in
// virtual time what fakefleet's live workers do on the wall clock, through
// the same engine model and the same wire encoders.
type worker struct {
	run       *Run
	index     int
	label     string
	group     *WorkerGroup
	role      string
	component string
	id        uint64 // instance id (a lease id, live)
	pod       string // Pod name under the Kubernetes sources
	fields    publish.Fields
	ranks     []*rank

	pub     publisher         // kv_metrics
	kvPub   publisher         // kv-events
	records map[string][]byte // what the worker has written, by key

	alive   bool
	stalled bool
	failing bool
	// partitioned: the router cannot reach the worker's publishers; their
	// messages are lost and its subscriptions have no session.
	partitioned bool
	// linkDown: a random link failure (network.link_failures) has broken
	// the connections, until the router reconnects.
	linkDown bool
	// degraded: the network between the router and the worker's
	// publishers adds degradeDelay to every message and loses each with
	// probability degradeLoss (degrade, until heal).
	degraded     bool
	degradeDelay time.Duration
	degradeLoss  float64
	// registered: the worker's records are in etcd under a live lease
	// (false after lease_expiry until it registers again); leaseEnds is
	// when a dead worker's lease lapses (zero while it lives); leaseGen
	// numbers its lease expiries.
	registered bool
	leaseEnds  time.Time
	leaseGen   uint64
	// followed: discovery names the worker's channels to the router,
	// whose kv-events subscription is to followedKV; followGen numbers the
	// times it stopped following them, so a pending connect of an older
	// subscription does nothing.
	followed   bool
	followedKV uint64
	followGen  uint64
	// slow multiplies decode step times (1 = normal); engines read it
	// through slowTiming.
	slow float64
	// Engine time is virtual time minus every stall so far, so a stalled
	// engine's timeline freezes instead of catching up on resume.
	offset    time.Duration
	stalledAt time.Time
}

// publisher is one incarnation of the worker's kv_metrics PUB socket.
type publisher struct {
	id       uint64
	seq      uint64
	endpoint string
	// subscribed: the router's subscription to this incarnation is live;
	// earlier messages were lost (ZMQ slow joiner).
	subscribed bool
	// relay is the subscription's broker state under the broker transport.
	relay relay
	// tail is when the stream's last message arrives: one TCP connection
	// delivers in order, so no later message arrives before it.
	tail time.Time
	// drop is how many of the incarnation's next messages are lost on the
	// way (the drop fault): numbered, then never delivered.
	drop int
	// ring keeps a kv-events publisher's last messages for replay
	// (kv_replay); nil when it offers none.
	ring *replayRing
}

// rank is one engine and its step timer.
type rank struct {
	w    *worker
	idx  uint32
	eng  *engine.Engine
	jobs map[uint64]*job

	// One live step timer: a superseded one still fires, finds the time
	// is not timerAt, and does nothing. fire and flushFn are bound once so
	// scheduling allocates nothing.
	timerSet bool
	timerAt  time.Time
	fire     Action
	flushFn  Action

	last         publish.Load
	flushPending bool

	outs []engine.Output // step's output buffer, reused
}

// job is a request's hop on one rank.
type job struct {
	req     *request
	prefill bool // the prefill hop of a disaggregated request
}

const jsonSafeMask = 1<<53 - 1

// newWorker builds the group's inGroup-th worker, index in the fleet,
// whose ranks run on cfg (rankConfig) slowed by the slow fault.
func newWorker(r *Run, index int, g *WorkerGroup, inGroup int, cfg engine.Config) *worker {
	w := &worker{run: r, index: index, group: g, role: g.Role, alive: true, registered: true, slow: 1}
	w.component = g.Role
	if g.Role == "aggregated" {
		w.component = "backend"
	}
	w.label = fmt.Sprintf("w%02d-%s", index, g.Role[:3])
	for _, f := range g.LoadFields {
		switch f {
		case "active_decode_blocks":
			w.fields.ActiveDecodeBlocks = true
		case "active_prefill_tokens":
			w.fields.ActivePrefillTokens = true
		}
	}
	// Lease ids are positive int64s; publisher ids are JSON-safe.
	w.id = r.ids.Uint64()>>1 | 1
	if inGroup < len(g.InstanceIDs) {
		w.id = g.InstanceIDs[inGroup]
	}
	if r.sc.Discovery.Kubernetes() {
		// The id is still drawn above, so the publisher ids that follow
		// are the same under every discovery shape.
		w.pod = podName(w.component, index)
		w.id = k8ssource.HashPodName(w.pod)
	}
	w.newPublisher()
	cfg.Timing = slowTiming{cfg.Timing, w}
	for i := 0; i < g.DPSize; i++ {
		rk := &rank{w: w, idx: uint32(i), eng: engine.New(cfg), jobs: map[uint64]*job{}}
		rk.fire, rk.flushFn = rk.onTimer, rk.flush
		w.ranks = append(w.ranks, rk)
	}
	w.records = registrar.Records(w.registrarWorker(), w.id)
	return w
}

// cut reports whether the network between the router and w's publishers
// is down, by a partition fault or a link failure.
func (w *worker) cut() bool { return w.partitioned || w.linkDown }

// newPublisher starts a new incarnation of the worker's kv_metrics and
// kv-events publishers (one PUB socket each, as live).
func (w *worker) newPublisher() {
	ip := fmt.Sprintf("10.0.%d.%d", w.index/250, w.index%250+1)
	w.pub = publisher{id: w.run.ids.Uint64() & jsonSafeMask}
	w.pub.endpoint = fmt.Sprintf("tcp://%s:%d", ip, 20000+w.run.ids.IntN(20000))
	w.kvPub = publisher{id: w.run.ids.Uint64() & jsonSafeMask}
	w.kvPub.endpoint = fmt.Sprintf("tcp://%s:%d", ip, 40000+w.run.ids.IntN(20000))
	if w.group.offersReplay() {
		w.kvPub.ring = newReplayRing(w.group.replayBuffer())
	}
}

func (w *worker) registrarWorker() registrar.Worker {
	g, sc := w.group, w.run.sc
	return registrar.Worker{Namespace: sc.Namespace, Component: w.component, WorkerType: w.role, Model: sc.Model,
		BlockSize: g.BlockSize, TotalKVBlocks: g.TotalKVBlocks, MaxNumBatchedTokens: g.MaxNumBatchedTokens,
		MaxNumSeqs: g.MaxNumSeqs, ContextLength: g.ContextLength, DPSize: g.DPSize,
		Transport: fmt.Sprintf("10.0.%d.%d:9000/%s", w.index/250, w.index%250+1, w.component),
		Channels: []registrar.Channel{
			{Topic: discovery.TopicLoad, PublisherID: w.pub.id, Endpoint: w.pub.endpoint},
			{Topic: discovery.TopicKVEvents, PublisherID: w.kvPub.id, Endpoint: w.kvPub.endpoint},
		}}
}

// discoveryRecords returns records as discovery records in key order (maps
// iterate randomly).
func discoveryRecords(records map[string][]byte) []events.DiscoveryRecord {
	keys := make([]string, 0, len(records))
	for k := range records {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]events.DiscoveryRecord, 0, len(keys))
	for _, k := range keys {
		out = append(out, events.DiscoveryRecord{Keyspace: keyspaceOf(k), Key: k, Value: records[k]})
	}
	return out
}

func keyspaceOf(key string) events.Keyspace {
	switch {
	case strings.HasPrefix(key, "v1/instances/"):
		return events.Instances
	case strings.HasPrefix(key, "v1/mdc/"):
		return events.Models
	}
	return events.EventChannels
}

// engineNow is the engine's time at virtual time now.
func (w *worker) engineNow(now time.Time) time.Time { return now.Add(-w.offset) }

// submit hands a hop to a rank's engine.
func (rk *rank) submit(j *job, maxTokens, imported int, now time.Time) {
	rk.jobs[j.req.id] = j
	er := engine.Request{ID: j.req.id, MaxTokens: maxTokens, Imported: imported, Arrival: now}
	if rk.w.group.BlockSize == rk.w.run.blockSize {
		er.Blocks = j.req.promptBlocks() // hashed once for every hop
	} else {
		er.Tokens = j.req.wr.PromptTokens()
	}
	rk.eng.Submit(er, rk.w.engineNow(now))
	rk.changed(now)
	rk.reschedule()
}

// reschedule keeps the live timer at the engine's next event.
func (rk *rank) reschedule() {
	w := rk.w
	at, ok := rk.eng.NextEvent()
	if !ok || !w.alive || w.stalled {
		rk.timerSet = false
		return
	}
	at = at.Add(w.offset)
	if rk.timerSet && rk.timerAt.Equal(at) {
		return
	}
	rk.timerSet, rk.timerAt = true, at
	w.run.loop.At(at, rk.fire)
}

func (rk *rank) onTimer(now time.Time) {
	if !rk.timerSet || !now.Equal(rk.timerAt) {
		return // superseded
	}
	rk.timerSet = false
	rk.step(now)
}

// step advances the engine to now and hands its outputs to the requests.
func (rk *rank) step(now time.Time) {
	// Taken while in use, so a step nested in an output's handling
	// would get a buffer of its own.
	outs := rk.eng.AdvanceAppend(rk.outs[:0], rk.w.engineNow(now))
	rk.outs = nil
	for _, o := range outs {
		j := rk.jobs[o.RequestID]
		if j == nil {
			continue
		}
		if o.Finished {
			delete(rk.jobs, o.RequestID)
		}
		j.req.output(rk, j, o, now)
	}
	rk.outs = outs[:0]
	rk.publishKV(now)
	rk.changed(now)
	rk.reschedule()
}

// publishKV publishes the engine's KV events since the last call, one
// message each, as the live fleet's KV reporter does.
func (rk *rank) publishKV(now time.Time) {
	evs := rk.eng.DrainKVEvents()
	w := rk.w
	w.run.kvEvents += uint64(len(evs))
	if !w.alive || w.stalled {
		return
	}
	if !w.kvPub.subscribed && w.kvPub.ring == nil {
		return // nobody listening: the events are lost, as on a PUB socket
	}
	for _, ev := range evs {
		w.kvPub.seq++
		re := publish.RouterEvent(w.id, rk.idx, ev)
		frames := wire.KVEventsMessageFast(w.kvPub.id, w.kvPub.seq, &re, now)
		if w.kvPub.ring != nil {
			// A publisher that offers replay numbers and keeps every
			// message, listened to or not.
			w.kvPub.ring.add(w.kvPub.seq, frames)
		}
		w.run.deliverKV(w, frames, now)
	}
}

// changed schedules a debounced publish of the rank's load, if it moved
// from the last sample (any later move calls changed again).
func (rk *rank) changed(now time.Time) {
	if rk.flushPending || rk.w.stalled || !rk.w.alive || rk.load() == rk.last {
		return
	}
	rk.flushPending = true
	rk.w.run.loop.At(now.Add(rk.w.run.sc.Network.PublishDebounce.Std()), rk.flushFn)
}

func (rk *rank) load() publish.Load {
	used, dec, pre := rk.eng.Load()
	return publish.Load{KVUsedBlocks: used, ActiveDecodeBlocks: dec, ActivePrefillTokens: pre}
}

// flush publishes the rank's load if it changed since its last sample.
func (rk *rank) flush(now time.Time) {
	rk.flushPending = false
	w := rk.w
	if w.stalled || !w.alive {
		return
	}
	l := rk.load()
	if l == rk.last {
		return
	}
	rk.last = l
	w.run.observeLoad(now, rk, l.KVUsedBlocks)
	a := wire.ActiveLoad{WorkerID: w.id, DPRank: rk.idx, KVUsedBlocks: wire.U64(l.KVUsedBlocks)}
	if w.fields.ActiveDecodeBlocks {
		a.ActiveDecodeBlocks = wire.U64(l.ActiveDecodeBlocks)
	}
	if w.fields.ActivePrefillTokens {
		a.ActivePrefillTokens = wire.U64(l.ActivePrefillTokens)
	}
	w.pub.seq++
	w.run.deliverLoad(w, wire.LoadMessage(w.pub.id, w.pub.seq, a, now), now)
}

// failJobs ends every request on the worker's ranks (kill, reset).
func (w *worker) failJobs(now time.Time, why string) {
	for _, rk := range w.ranks {
		ids := make([]uint64, 0, len(rk.jobs))
		for id := range rk.jobs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			j := rk.jobs[id]
			delete(rk.jobs, id)
			j.req.fail(now, why)
		}
	}
}

// slowTiming is the worker's timing with its slow factor on the decode
// part of each step (the slow fault). The decode part is what the step
// would cost without its prefill chunks, so the prefill part is unchanged.
type slowTiming struct {
	engine.Timing
	w *worker
}

func (t slowTiming) StepTime(s engine.Step) time.Duration {
	d := t.Timing.StepTime(s)
	if t.w.slow == 1 || len(s.Decode) == 0 {
		return d
	}
	decodeOnly := s
	decodeOnly.Prefill, decodeOnly.PrefillTokens = nil, 0
	dec := t.Timing.StepTime(decodeOnly)
	return d - dec + time.Duration(float64(dec)*t.w.slow)
}
