package replay

import (
	"fmt"
	"io"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"switchyard/fakefleet/engineworker"
	"switchyard/recorder"
	"switchyard/router/core"
	"switchyard/router/discovery"
	"switchyard/router/events"
	"switchyard/sim"
	"switchyard/sim/stats"
	"switchyard/sim/workload"
)

// CounterfactualReport compares a recording's outcomes with the same
// requests re-simulated under the recorded picker and under another one.
type CounterfactualReport struct {
	RunID    int64  `json:"run_id"`
	Kind     string `json:"kind"`
	Requests int    `json:"requests"`
	// Recorded summarises the outcomes as recorded; Baseline the
	// re-simulation under the recorded picker (what the simulator's own
	// error looks like); Alternative the re-simulation under Picker.
	Recorded       stats.Summary `json:"recorded"`
	Baseline       stats.Summary `json:"baseline"`
	Alternative    stats.Summary `json:"alternative"`
	RecordedPicker string        `json:"recorded_picker"`
	Picker         string        `json:"picker"`
}

// Counterfactual re-simulates the recorded requests (their arrival times,
// prompts and output lengths) with the fake fleet, under the recorded
// picker and under pickerName. A simulated run keeps its scenario's fleet
// and network; a live run's fleet is rebuilt from its discovery records.
func Counterfactual(rd *recorder.Reader, runID int64, pickerName string) (*CounterfactualReport, error) {
	info, err := findRun(rd, runID)
	if err != nil {
		return nil, err
	}
	reqs, outcomes, pins, fleet, err := collect(rd, info.ID)
	if err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("replay: run %d recorded no requests", info.ID)
	}
	sc, err := scenarioOf(info, fleet)
	if err != nil {
		return nil, err
	}
	rep := &CounterfactualReport{RunID: info.ID, Kind: info.Kind, Requests: len(reqs), RecordedPicker: info.Picker, Picker: pickerName}
	rec := stats.NewCollector(stats.SLO{TTFT: sc.SLO.TTFT.Std(), ITL: sc.SLO.ITL.Std()})
	// A simulated run's arrivals count from its warmup, so the
	// re-simulation under the recorded picker reproduces it exactly; a
	// live run's from its first request.
	start := reqs[0].At
	if info.Kind == "sim" {
		start = sim.Epoch.Add(sc.Warmup.Std())
	}
	rep.Recorded = recordedSummary(rec, reqs, outcomes, pins, start)
	if rep.Baseline, err = resimulate(sc, reqs, start, info.Picker); err != nil {
		return nil, err
	}
	if rep.Alternative, err = resimulate(sc, reqs, start, pickerName); err != nil {
		return nil, err
	}
	return rep, nil
}

// recordedSummary is the recording's own figures. An outcome counts
// towards the hit ratio when its request was pinned to a worker, as the
// simulator counts it: the outcome alone does not say so, its selection
// does.
func recordedSummary(rec *stats.Collector, reqs []recorder.Request, outcomes []recorder.Outcome, pins map[uint64]pin, start time.Time) stats.Summary {
	arrival := make(map[uint64]time.Time, len(reqs))
	for _, r := range reqs {
		arrival[r.RequestID] = r.At
	}
	var last time.Duration
	for _, o := range outcomes {
		at, ok := arrival[o.RequestID]
		if !ok {
			at = o.At
		}
		p := pins[o.RequestID]
		rec.Add(stats.Request{ID: o.RequestID, Arrival: at.Sub(start), PromptTokens: o.PromptTokens, CachedTokens: o.CachedTokens,
			OutputTokens: o.OutputTokens, TTFT: o.TTFT, E2E: o.E2E, ITL: o.ITL, Status: o.Status, Worker: p.worker, Reason: p.reason})
		last = max(last, o.At.Sub(start))
	}
	return rec.Summary(last)
}

// pin is the worker a request was last pinned to, and why.
type pin struct{ worker, reason string }

func resimulate(sc *sim.Scenario, reqs []recorder.Request, start time.Time, pickerName string) (stats.Summary, error) {
	col := stats.NewCollector(stats.SLO{TTFT: sc.SLO.TTFT.Std(), ITL: sc.SLO.ITL.Std()})
	run, err := sim.New(sc, sim.Options{Picker: pickerName, Source: newRecordedSource(reqs, start), Observer: sim.Collect(col)})
	if err != nil {
		return stats.Summary{}, err
	}
	sum, err := run.Execute()
	if err != nil {
		return stats.Summary{}, err
	}
	return col.Summary(sum.Virtual), nil
}

// collect reads the run's requests, outcomes and the (decode) worker each
// successful selection pinned, and the workers its discovery records
// described (for live runs).
func collect(rd *recorder.Reader, runID int64) ([]recorder.Request, []recorder.Outcome, map[uint64]pin, []*discovery.Worker, error) {
	var reqs []recorder.Request
	var outs []recorder.Outcome
	pins := make(map[uint64]pin)
	rc, err := core.New(core.Options{Picker: "round_robin"})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	err = rd.Entries(runID, func(e recorder.Entry) error {
		switch v := e.Value.(type) {
		case recorder.Request:
			reqs = append(reqs, v)
		case recorder.Outcome:
			outs = append(outs, v)
		case recorder.Selection:
			if v.OK {
				pins[v.RequestID] = pin{worker: fmt.Sprintf("%d/%d", v.Sel.Decode.WorkerID, v.Sel.Decode.DPRank), reason: v.Sel.DecodeReason}
			}
		case events.DiscoveryPut, events.DiscoveryDelete, events.DiscoveryResync, events.DiscoveryPrune, events.DiscoveryReset:
			rc.ApplyDiscovery(v.(events.Event))
		case recorder.Published:
			rc.Publish(v.At)
		}
		return nil
	})
	return reqs, outs, pins, rc.Snapshot().Workers, err
}

// scenarioOf is the scenario to re-simulate: a simulated run's own, or
// one built from a live run's workers, one group per worker.
func scenarioOf(info recorder.RunInfo, workers []*discovery.Worker) (*sim.Scenario, error) {
	if info.Kind == "sim" {
		var sc sim.Scenario
		if err := yaml.Unmarshal([]byte(info.Scenario), &sc); err != nil {
			return nil, fmt.Errorf("replay: the run's scenario: %w", err)
		}
		return sim.Normalize(&sc)
	}
	sc := &sim.Scenario{Seed: info.Seed, Picker: info.Picker}
	for _, w := range workers {
		g := sim.WorkerGroup{Role: w.Role.String(), Count: 1, DPSize: int(max(w.Runtime.DPSize, 1)), BlockSize: int(w.BlockSize),
			InstanceIDs: []uint64{w.InstanceID}}
		if g.Role == "decode" || g.Role == "prefill" || g.Role == "aggregated" {
			if v := w.Runtime.TotalKVBlocks; v != nil {
				g.TotalKVBlocks = int(*v)
			}
			if v := w.Runtime.MaxNumBatchedTokens; v != nil {
				g.MaxNumBatchedTokens = int(*v)
			}
			if v := w.Runtime.MaxNumSeqs; v != nil {
				g.MaxNumSeqs = int(*v)
			}
			if v := w.Runtime.ContextLength; v != nil {
				g.ContextLength = int(*v) // a profile's engine enforces it
			}
			sc.Namespace, sc.Model = w.Namespace, w.Model
			sc.Fleet = append(sc.Fleet, g)
		}
	}
	if len(sc.Fleet) == 0 {
		return nil, fmt.Errorf("replay: run %d's discovery records describe no worker to simulate", info.ID)
	}
	return sim.Normalize(sc)
}

// recordedSource replays recorded requests as a workload: the same
// arrival offsets, prompts (synthesized from the request id when the
// recording has only a length) and output lengths.
type recordedSource struct {
	reqs  []recorder.Request
	start time.Time
	i     int
}

func newRecordedSource(reqs []recorder.Request, start time.Time) *recordedSource {
	reqs = slices.Clone(reqs)
	slices.SortStableFunc(reqs, func(a, b recorder.Request) int { return a.At.Compare(b.At) })
	return &recordedSource{reqs: reqs, start: start}
}

func (s *recordedSource) Next() (workload.Request, bool) {
	if s.i >= len(s.reqs) {
		return workload.Request{}, false
	}
	r := s.reqs[s.i]
	s.i++
	toks := r.Tokens
	if toks == nil {
		toks = engineworker.SyntheticPrompt(int(min(r.PromptTokens, workload.MaxPromptTokens)), r.RequestID)
	}
	return workload.Request{ID: r.RequestID, Arrival: max(r.At.Sub(s.start), 0), Tokens: toks, MaxTokens: max(r.MaxTokens, 1), Session: r.Session}, true
}

// Print writes the comparison as a table.
func (c *CounterfactualReport) Print(out io.Writer) {
	fmt.Fprintf(out, "run %d (%s): %d requests; recorded picker %s, counterfactual %s\n", c.RunID, c.Kind, c.Requests, c.RecordedPicker, c.Picker)
	fmt.Fprintf(out, "  %-28s %10s %10s %10s %10s %9s\n", "", "TTFT p50", "TTFT p99", "E2E p50", "E2E p99", "hit ratio")
	row := func(name string, s stats.Summary) {
		fmt.Fprintf(out, "  %-28s %10.1f %10.1f %10.1f %10.1f %9.3f\n", name, s.TTFT.P50, s.TTFT.P99, s.E2E.P50, s.E2E.P99, s.HitRatio)
	}
	row("recorded", c.Recorded)
	row("re-simulated, "+c.RecordedPicker, c.Baseline)
	row("re-simulated, "+c.Picker, c.Alternative)
}
