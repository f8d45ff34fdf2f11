package expect

import (
	"encoding/binary"
	"slices"
	"time"

	"switchyard/recorder"
	"switchyard/router/core"
	"switchyard/router/events"
)

// Evidence is what one run did, in scenario time (offsets from the time
// the scenario started).
type Evidence struct {
	// Requests in the order the router received them.
	Requests []Request
	// Picks in the order they were made.
	Picks []Pick
	// Counts are the times each counter was incremented, in order.
	Counts map[string][]time.Duration
	// End is the time of the last output.
	End time.Duration
	// SLO is the latency bound goodput counts against (zero: no bound).
	SLO SLO
	// Unobserved names the metrics this run could not observe, with why
	// (a live run learns no request's cached tokens): an expectation on
	// one of them is skipped, neither held nor failed.
	Unobserved map[string]string
}

// SLO bounds a served request's latencies for goodput.
type SLO struct{ TTFT, ITL time.Duration }

// Request is one request the router received and how it ended.
type Request struct {
	ID      uint64
	Arrival time.Duration
	// Status is ok, failed, refused, rejected or cancelled; "" when the
	// run ended with no answer recorded (a lost request).
	Status string
	// End is when the answer was recorded.
	End                        time.Duration
	TTFT, E2E, ITL             time.Duration
	PromptTokens, CachedTokens int
}

// Pick is one selection the router made.
type Pick struct {
	At        time.Duration
	RequestID uint64
	// Decode and Prefill are the pinned workers' fleet indexes; -1 for no
	// prefill pin, and for a worker the fleet does not know.
	Decode, Prefill int
	// Reason is the decode pin's selection reason.
	Reason string
}

// Count returns how many times name was counted in [from, to).
func (e *Evidence) Count(name string, from, to time.Duration) int {
	ts := e.Counts[name]
	lo, _ := slices.BinarySearch(ts, from)
	hi, _ := slices.BinarySearch(ts, to)
	return hi - lo
}

// Collector builds Evidence from the core's outputs: it is a core.Port.
type Collector struct {
	start time.Time
	index map[uint64]int
	ev    Evidence
	byID  map[uint64]int
	// loadSeq is each load stream's last sequence, to count gaps as the
	// load store sees them.
	loadSeq map[loadStream]uint64
	// scale multiplies every time and latency (SetTimeScale).
	scale float64
}

// SetTimeScale multiplies every time and latency collected by scale: a
// live run played at TimeScale reads in scenario time.
func (c *Collector) SetTimeScale(scale float64) {
	if scale > 0 {
		c.scale = scale
	}
}

func (c *Collector) scaled(d time.Duration) time.Duration {
	if c.scale == 0 || c.scale == 1 {
		return d
	}
	return time.Duration(float64(d) * c.scale)
}

type loadStream struct {
	ns  string
	pub uint64
}

// NewCollector collects outputs of a run that started at start over a
// fleet whose instance ids, in declaration order, are workerIDs.
func NewCollector(start time.Time, workerIDs []uint64, slo SLO) *Collector {
	idx := make(map[uint64]int, len(workerIDs))
	for i, id := range workerIDs {
		idx[id] = i
	}
	return &Collector{start: start, index: idx, byID: map[uint64]int{}, loadSeq: map[loadStream]uint64{},
		ev: Evidence{Counts: map[string][]time.Duration{}, SLO: slo}}
}

// Evidence is what was collected so far.
func (c *Collector) Evidence() *Evidence { return &c.ev }

func (c *Collector) at(t time.Time) time.Duration {
	d := c.scaled(t.Sub(c.start))
	c.ev.End = max(c.ev.End, d)
	return d
}

// kv counts a kv-events message the tracker applied, and a replayed one
// as recovered too.
func (c *Collector) kv(result string, replayed bool, at time.Duration) {
	c.count("kv."+result, at)
	if replayed {
		c.count("kv_replay.recovered", at)
	}
}

// maxCountN bounds what one output adds to a counter: a count is kept
// as one time per increment.
const maxCountN = 1 << 16

// countN counts name n times at at, at most maxCountN.
func (c *Collector) countN(name string, n uint64, at time.Duration) {
	for range min(n, maxCountN) {
		c.count(name, at)
	}
}

func (c *Collector) count(name string, at time.Duration) {
	ts := c.ev.Counts[name]
	// Outputs arrive in order; keep the slice sorted if a host's clocks
	// are not (a live recording's request and pick times come from
	// different goroutines).
	i := len(ts)
	for i > 0 && ts[i-1] > at {
		i--
	}
	c.ev.Counts[name] = slices.Insert(ts, i, at)
}

func (c *Collector) worker(id uint64) int {
	if i, ok := c.index[id]; ok {
		return i
	}
	return -1
}

// load counts one kv_metrics message by its result, and the sequence gaps
// on its stream as the load store sees them.
func (c *Collector) load(m *events.LoadMessage, result string) {
	at := c.at(m.At)
	c.count("load."+result, at)
	if len(m.Frames) >= 3 && len(m.Frames[2]) == 8 {
		k := loadStream{m.Namespace, m.PublisherID}
		seq := binary.BigEndian.Uint64(m.Frames[2])
		if last, ok := c.loadSeq[k]; ok && seq > last+1 {
			c.count("load.gap", at)
		}
		if last, ok := c.loadSeq[k]; !ok || seq > last {
			c.loadSeq[k] = seq
		}
	}
}

// Record takes one core output, or one entry of a recording.
func (c *Collector) Record(out core.Output) {
	switch o := out.(type) {
	case core.Request:
		c.byID[o.RequestID] = len(c.ev.Requests)
		c.ev.Requests = append(c.ev.Requests, Request{ID: o.RequestID, Arrival: c.at(o.At), PromptTokens: int(min(o.PromptTokens, 1<<31))})
	case core.Selection:
		at := c.at(o.At)
		if !o.OK {
			c.count("selection.none", at)
			return
		}
		p := Pick{At: at, RequestID: o.RequestID, Decode: c.worker(o.Sel.Decode.WorkerID), Prefill: -1, Reason: o.Sel.DecodeReason}
		if o.Sel.HasPrefill {
			p.Prefill = c.worker(o.Sel.Prefill.WorkerID)
		}
		// Counted with or without a prefill pin, as the picker's own
		// metrics count it: no_prefill_pool and conditional_bypass name
		// selections that pinned no prefill worker.
		if o.Sel.PrefillReason != "" {
			c.count("selection.prefill."+o.Sel.PrefillReason, at)
		}
		c.count("selection.decode."+o.Sel.DecodeReason, at)
		c.ev.Picks = append(c.ev.Picks, p)
	case core.Outcome:
		at := c.at(o.At)
		i, ok := c.byID[o.RequestID]
		if !ok {
			c.count("outcome.unknown_request", at)
			return
		}
		r := &c.ev.Requests[i]
		r.Status, r.End, r.TTFT, r.E2E, r.ITL, r.CachedTokens = o.Status, at, c.scaled(o.TTFT), c.scaled(o.E2E), c.scaled(o.ITL), o.CachedTokens
		if o.PromptTokens > 0 {
			r.PromptTokens = o.PromptTokens
		}
		c.count("outcome."+o.Status, at)
	case core.LoadApplied:
		if o.Msg != nil {
			c.load(o.Msg, o.Result.String())
		}
	case recorder.LoadMessage:
		// A recording keeps the message and its result's name.
		c.load(&o.LoadMessage, o.Result)
	case core.KVApplied:
		c.kv(o.Result, o.Replayed, c.at(o.At))
	case recorder.KVMessage:
		c.kv(o.Result, o.Replayed, c.at(o.At))
	case core.KVReplayFinished:
		at := c.at(o.At)
		switch o.Reason {
		case core.FinishedTimeout, core.FinishedOverflow, core.FinishedFailed:
			c.count("kv_replay."+o.Reason, at)
		}
		c.countN("kv_replay.lost", o.Lost, at)
		c.countN("kv_replay.duplicate", o.Duplicates, at)
	default:
		if name := countedAs(out); name != "" {
			c.count(name, c.at(out.Time()))
		}
	}
}

// countedAs is the counter an output that is only counted goes under; ""
// for one that is not counted.
func countedAs(out core.Output) string {
	switch o := out.(type) {
	case events.KVReplayWanted:
		return "kv_replay.requested"
	case core.ConfigChanged:
		return "config.changed"
	case core.Ended:
		return "ended." + o.Reason
	case core.Published:
		return "discovery.published"
	case events.DiscoveryPut:
		return "discovery.put"
	case events.DiscoveryDelete:
		return "discovery.delete"
	case events.DiscoveryResync:
		return "discovery.resync"
	case events.DiscoveryReset:
		return "discovery.reset"
	case events.LoadConnected:
		return "load.connected"
	case events.KVConnected:
		return "kv_session.connected"
	case events.KVDisconnected:
		return "kv_session.disconnected"
	case events.KVUnsubscribed:
		return "kv_session.unsubscribed"
	}
	return ""
}
