package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/recorder"
	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/events"
	"switchyard/router/gateway"
	"switchyard/router/kv"
	"switchyard/router/load"
	"switchyard/router/picker"
)

// recording feeds a live process's routing core to a recorder.Writer in
// the order the core applied each input, so that a replay of the file
// makes every selection again.
//
// Discovery batches, load and KV messages and picks arrive on different
// goroutines. One order lock serialises them while recording: each
// critical section applies one input (a discovery batch with its registry
// publish and the load store's and KV tracker's gate updates, a
// kv_metrics message or reconnect, a kv-events message or reconnect, a
// lost kv-events publisher, a pick or an ended notice) and records it, so
// the recorded order is the order of application. Record calls only copy and enqueue, so the lock is held
// for the work the core does anyway plus a copy.
//
// Times that cross into the core lose their monotonic clock reading
// (Round(0)): durations the core computes in the live process are then
// the wall-clock durations a replay computes from the recorded times.
type recording struct {
	w     *recorder.Writer
	reg   *discovery.Registry
	loads *load.Store
	kv    *kv.Tracker
	clk   clock.Clock

	order sync.Mutex
	// Guarded by order.
	off   bool // the process is closing: inputs are applied, not recorded
	cands []picker.Candidate
}

func newRecording(w *recorder.Writer, reg *discovery.Registry, loads *load.Store, tracker *kv.Tracker, clk clock.Clock) *recording {
	return &recording{w: w, reg: reg, loads: loads, kv: tracker, clk: clk}
}

// stop ends recording: inputs still arriving while the process shuts down
// are applied but not recorded, so closing the writer afterwards loses
// nothing it was given.
func (r *recording) stop() {
	r.order.Lock()
	r.off = true
	r.order.Unlock()
}

// discovery is the supervisor's hook: every published snapshot installs
// the load store's and the KV tracker's admission gates under the order
// lock, so both follow the registry at exactly the recorded point.
func (r *recording) discovery() *discoverysource.Recording {
	return &discoverysource.Recording{
		Order: &r.order,
		Input: func(ev events.Event) {
			if !r.off {
				r.w.Discovery(ev)
			}
		},
		Published: func(snap *discovery.Snapshot, at time.Time) {
			r.loads.SetLive(snap)
			r.kv.SetLive(snap)
			if !r.off {
				r.w.Published(recorder.Published{At: at, Generation: snap.Generation, Workers: len(snap.Workers)})
			}
		},
	}
}

// sink is the kv_metrics subscriptions' sink.
func (r *recording) sink() eventplane.Sink { return recordingSink{r} }

type recordingSink struct{ r *recording }

// Connected implements eventplane.Sink.
func (s recordingSink) Connected(namespace string, publisherID uint64, at time.Time) {
	ev := events.LoadConnected{At: at.Round(0), Namespace: namespace, PublisherID: publisherID}
	r := s.r
	r.order.Lock()
	defer r.order.Unlock()
	r.loads.Connected(ev)
	if !r.off {
		r.w.LoadConnected(ev)
	}
}

// Deliver implements eventplane.Sink.
func (s recordingSink) Deliver(namespace string, publisherID uint64, frames [][]byte, at time.Time) envelope.Result {
	ev := events.LoadMessage{At: at.Round(0), Namespace: namespace, PublisherID: publisherID, Frames: frames}
	r := s.r
	r.order.Lock()
	defer r.order.Unlock()
	res := r.loads.Apply(&ev)
	if !r.off {
		r.w.LoadMessage(&ev, res)
	}
	return res
}

// kvSink is the kv-events subscriptions' sink.
func (r *recording) kvSink() eventplane.Sink { return recordingKVSink{r} }

type recordingKVSink struct{ r *recording }

// Connected implements eventplane.Sink: the tracker does nothing on a
// reconnect (see kvSink), but a replay follows the same inputs.
func (s recordingKVSink) Connected(namespace string, publisherID uint64, at time.Time) {
	r := s.r
	r.order.Lock()
	defer r.order.Unlock()
	if !r.off {
		r.w.KVConnected(namespace, publisherID, at.Round(0))
	}
}

// Deliver implements eventplane.Sink.
func (s recordingKVSink) Deliver(namespace string, publisherID uint64, frames [][]byte, at time.Time) envelope.Result {
	ev := events.KVMessage{At: at.Round(0), Namespace: namespace, PublisherID: publisherID, Frames: frames}
	r := s.r
	r.order.Lock()
	defer r.order.Unlock()
	res := r.kv.Apply(&ev)
	if !r.off {
		r.w.KVMessage(ev.Namespace, ev.PublisherID, ev.Frames, ev.At, res)
	}
	return kvResult(res)
}

// kvLost applies a lost kv-events publisher. Only a call that cleared
// ranks changed the core, so only such a call is recorded (a kv_messages
// row without frames, result kv.PublisherLostResult), as the simulator's
// core records it.
func (r *recording) kvLost(ev events.KVPublisherLost) int {
	ev.At = ev.At.Round(0)
	r.order.Lock()
	defer r.order.Unlock()
	n := r.kv.PublisherLost(ev)
	if n > 0 && !r.off {
		r.w.KVMessage(ev.Namespace, ev.PublisherID, nil, ev.At, kv.PublisherLostResult)
	}
	return n
}

// wrap decorates a picker (picker.Holder.Wrap keeps it on top of
// replacements).
func (r *recording) wrap(p picker.Picker) picker.Picker {
	x, _ := p.(picker.Explainer)
	return &recordingPicker{r: r, inner: p, explain: x}
}

// recordingPicker records each pick and ended notice around its picker.
type recordingPicker struct {
	r       *recording
	inner   picker.Picker
	explain picker.Explainer
}

// Pick implements picker.Picker. It picks against the registry's snapshot
// as of the pick's place in the recorded order, not the one the caller
// read before waiting for the lock: a discovery batch published in
// between is part of what the pick saw, in the recording and in replay.
func (p *recordingPicker) Pick(req picker.Request, _ *discovery.Snapshot) (picker.Selection, bool) {
	req.Now = req.Now.Round(0)
	r := p.r
	r.order.Lock()
	defer r.order.Unlock()
	snap := r.reg.Snapshot()
	if !r.off {
		r.w.Request(recorder.Request{At: req.Now, RequestID: req.ID, Model: req.Model, Namespaces: req.Namespaces,
			PromptTokens: req.PromptTokens, MaxTokens: req.MaxTokens, Generation: snap.Generation, Route: req.Route})
	}
	sel, ok := p.inner.Pick(req, snap)
	if !r.off {
		r.cands = r.cands[:0]
		if ok && p.explain != nil {
			r.cands = p.explain.Candidates(r.cands)
		}
		r.w.Selection(recorder.Selection{At: req.Now, RequestID: req.ID, OK: ok, Sel: sel, Candidates: r.cands})
	}
	return sel, ok
}

// Ended implements picker.Picker.
func (p *recordingPicker) Ended(req picker.Request, sel picker.Selection) {
	r := p.r
	r.order.Lock()
	defer r.order.Unlock()
	if !r.off {
		r.w.Ended(recorder.Ended{At: r.clk.Now().Round(0), RequestID: req.ID})
	}
	p.inner.Ended(req, sel)
}

// Candidates implements picker.Explainer for the wrapped picker (none
// when it lists none).
func (p *recordingPicker) Candidates(dst []picker.Candidate) []picker.Candidate {
	if p.explain == nil {
		return dst
	}
	return p.explain.Candidates(dst)
}

// outcome records how a pinned request ended. Outcomes are not inputs of
// the core; the order lock only serialises the record call, as the
// writer asks of its callers.
func (r *recording) outcome(o gateway.Outcome) {
	r.order.Lock()
	defer r.order.Unlock()
	if r.off {
		return
	}
	r.w.Outcome(recorder.Outcome{At: o.End.Round(0), RequestID: o.RequestID, Status: o.Status, Error: o.Error,
		PromptTokens: int(min(o.PromptTokens, 1<<31-1)), OutputTokens: o.OutputTokens, TTFT: o.TTFT, E2E: o.E2E, ITL: o.ITL})
}

// recorderCollector exports the writer's counts at scrape time.
type recorderCollector struct{ w *recorder.Writer }

var (
	recordsDesc = prometheus.NewDesc("switchyard_recorder_records_total",
		"Records written to the recording (--record), by table.", []string{"table"}, nil)
	recordDropsDesc = prometheus.NewDesc("switchyard_recorder_dropped_total",
		"Records the recording lost (queue full, failed write), by table. A recording with drops cannot be replayed.", []string{"table"}, nil)
	recordQueueDesc = prometheus.NewDesc("switchyard_recorder_queued",
		"Records waiting to be written to the recording.", nil, nil)
)

// Describe implements prometheus.Collector.
func (recorderCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- recordsDesc
	ch <- recordDropsDesc
	ch <- recordQueueDesc
}

// Collect implements prometheus.Collector.
func (c recorderCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.w.Stats()
	for _, t := range recorder.Tables() {
		ch <- prometheus.MustNewConstMetric(recordsDesc, prometheus.CounterValue, float64(st.Written[t]), t)
		ch <- prometheus.MustNewConstMetric(recordDropsDesc, prometheus.CounterValue, float64(st.Dropped[t]), t)
	}
	ch <- prometheus.MustNewConstMetric(recordQueueDesc, prometheus.GaugeValue, float64(st.Queued))
}
