package replay

import (
	"fmt"
	"time"

	"switchyard/recorder"
	"switchyard/sim"
	"switchyard/sim/workload"
)

// Resimulation is a recorded run made ready to simulate again: the
// scenario to run, the recorded requests with their outcomes, and the
// instant their arrival offsets count from.
//
// A simulated run keeps its own scenario. A live run's fleet is rebuilt
// from its discovery records, one group per worker with the worker's
// instance id and card values, so a simulated selection names the same
// workers as the recorded one; the router's dynamo.load.max_staleness is
// read from the recorded configuration. Nothing in the scenario describes
// the live network: a caller that knows better sets Scenario.Network.
type Resimulation struct {
	Run      recorder.RunInfo
	Scenario *sim.Scenario
	Requests []recorder.Request
	Outcomes []recorder.Outcome
	// Start is the zero of the arrival offsets: a live run's first
	// request, a simulated run's warmup end.
	Start time.Time
}

// PrepareResimulation reads run runID of rd (0: the last run).
func PrepareResimulation(rd *recorder.Reader, runID int64) (*Resimulation, error) {
	info, err := findRun(rd, runID)
	if err != nil {
		return nil, err
	}
	reqs, outs, _, workers, err := collect(rd, info.ID)
	if err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("replay: run %d recorded no requests", info.ID)
	}
	sc, err := scenarioOf(info, workers)
	if err != nil {
		return nil, err
	}
	start := reqs[0].At
	for _, r := range reqs {
		if r.At.Before(start) {
			start = r.At
		}
	}
	if info.Kind == "sim" {
		start = sim.Epoch.Add(sc.Warmup.Std())
	} else {
		// The live router's own settings: its staleness bound, and its KV
		// and tracking options, or the re-simulation routes differently.
		p, err := paramsOf(info)
		if err != nil {
			return nil, err
		}
		if sc.Router.MaxStaleness == 0 {
			sc.Router.MaxStaleness = sim.Duration(p.maxStaleness)
		}
		sc.Router.KV = sim.KVParamsOf(p.kv)
	}
	return &Resimulation{Run: info, Scenario: sc, Requests: reqs, Outcomes: outs, Start: start}, nil
}

// Source replays the recorded requests as a workload, in arrival order:
// each arrives its recorded offset from Start after the scenario's
// warmup, with its recorded id, prompt (synthesized from the request id
// when the recording holds only the prompt's length) and max_tokens.
// Every call starts from the first request.
func (r *Resimulation) Source() workload.Source { return newRecordedSource(r.Requests, r.Start) }
