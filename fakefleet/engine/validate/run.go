package validate

import (
	"fmt"
	"math/rand/v2"
	"time"

	"switchyard/fakefleet/engine"
	"switchyard/internal/groundtruth"
)

// StageGap is the pause between inference-perf stages: a stage starts this
// long after the previous stage's last request finished.
const StageGap = time.Second

// epoch is the virtual time a run starts at.
var epoch = time.Unix(0, 0).UTC()

// Run simulates exp with setup for seed and returns its predictions. It is
// deterministic: the same experiment, setup and seed give the same result.
func Run(exp *groundtruth.Experiment, setup Setup, seed uint64) (Prediction, error) {
	return RunWithProgress(exp, setup, seed, nil)
}

// RunWithProgress is Run, calling progress (when non-nil) with the number
// of requests that ended since its previous call.
func RunWithProgress(exp *groundtruth.Experiment, setup Setup, seed uint64, progress func(int)) (Prediction, error) {
	if err := Check(exp); err != nil {
		return Prediction{}, err
	}
	d := newDriver(exp.Engine.DP, setup, progress)
	switch exp.Workload.Kind {
	case groundtruth.SharedPrefix:
		reqs := d.runStages(exp, seed)
		return sharedPrefixPrediction(exp, reqs, setup.ClientOverhead), nil
	case groundtruth.RequestTrace:
		reqs := traceRequests(exp, rand.New(rand.NewPCG(seed, streamTrace)))
		d.run(reqs, epoch)
		return tracePrediction(exp, reqs)
	}
	return Prediction{}, fmt.Errorf("%w: workload kind %q", ErrNotSimulatable, exp.Workload.Kind)
}

// driver runs data-parallel engine ranks in virtual time.
type driver struct {
	ranks       []*engine.Engine
	outstanding []int // requests submitted to a rank and not ended
	inFlight    map[uint64]*simRequest
	nextID      uint64
	progress    func(int)
	firstChunk  int // tokens the client's first chunk carries
}

func newDriver(dp int, setup Setup, progress func(int)) *driver {
	cfg := setup.Engine
	d := &driver{inFlight: map[uint64]*simRequest{}, progress: progress, firstChunk: max(setup.FirstChunkTokens, 1)}
	for range max(dp, 1) {
		d.ranks = append(d.ranks, engine.New(cfg))
		d.outstanding = append(d.outstanding, 0)
	}
	return d
}

// runStages plays inference-perf's stages one after another on the same
// warm engines.
func (d *driver) runStages(exp *groundtruth.Experiment, seed uint64) []*simRequest {
	w := exp.Workload
	prompts := sharedPrefixPrompts(*w.SharedPrefix, vocabOf(exp), rand.New(rand.NewPCG(seed, streamPrompts)))
	var all []*simRequest
	start := epoch
	for i, st := range w.Stages {
		reqs := stageRequests(st, i, prompts, w.SharedPrefix.OutputLen, rand.New(rand.NewPCG(seed, streamArrivals+uint64(i))))
		last := d.run(reqs, start)
		start = last.Add(StageGap)
		all = append(all, reqs...)
	}
	return all
}

// run submits reqs (sorted by offset) at start+offset and advances the
// engines until every one has ended; it returns when the last one did.
func (d *driver) run(reqs []*simRequest, start time.Time) time.Time {
	last := start
	next, ended := 0, 0
	for ended < len(reqs) {
		engineAt, busy := d.nextEngineEvent()
		if next < len(reqs) {
			// Arrivals first on a tie, so they join the batch planned then.
			if at := start.Add(reqs[next].offset); !busy || !at.After(engineAt) {
				d.submit(reqs[next], at)
				next++
				continue
			}
		}
		if !busy {
			break // nothing left to arrive or run; cannot happen while requests are open
		}
		n := d.advance(engineAt)
		ended += n
		if n > 0 {
			last = engineAt
			if d.progress != nil {
				d.progress(n)
			}
		}
	}
	return last
}

func (d *driver) nextEngineEvent() (time.Time, bool) {
	var at time.Time
	busy := false
	for _, e := range d.ranks {
		if t, ok := e.NextEvent(); ok && (!busy || t.Before(at)) {
			at, busy = t, true
		}
	}
	return at, busy
}

// submit sends r to the rank with the fewest outstanding requests (lowest
// index on a tie), as vLLM's data-parallel front end balances by queue
// length.
func (d *driver) submit(r *simRequest, at time.Time) {
	rank := 0
	for i, n := range d.outstanding {
		if n < d.outstanding[rank] {
			rank = i
		}
	}
	d.nextID++
	d.inFlight[d.nextID] = r
	d.outstanding[rank]++
	r.sent = at
	d.ranks[rank].Submit(engine.Request{ID: d.nextID, Tokens: r.tokens, MaxTokens: r.maxTokens, Arrival: at}, at)
}

// advance completes every step ending at now and returns how many requests
// ended (finished or rejected).
func (d *driver) advance(now time.Time) int {
	ended := 0
	for rank, e := range d.ranks {
		for _, o := range e.Advance(now) {
			r := d.inFlight[o.RequestID]
			if r == nil {
				continue
			}
			r.generated += o.NewTokens
			if r.first.IsZero() && (r.generated >= d.firstChunk || o.Finished) && !o.Rejected {
				r.first = now
			}
			if !o.Finished {
				continue
			}
			r.done, r.failed = now, o.Rejected
			delete(d.inFlight, o.RequestID)
			d.outstanding[rank]--
			ended++
		}
	}
	return ended
}
