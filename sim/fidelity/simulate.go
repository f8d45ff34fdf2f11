package fidelity

import (
	"fmt"
	"time"

	"switchyard/recorder"
	"switchyard/sim"
	"switchyard/sim/replay"
)

// DefaultNetwork is the live stack's hops as the re-simulation models
// them (docs/fidelity.md, "Network"). RequestDelay is charged twice on a
// disaggregated request (router to prefill worker, prefill to decode
// worker), so it stands for half the live overhead a first token carries
// beyond the engine's own time: the router's HTTP hop to the frontend,
// the frontend's hand-off between its hops and the relay of the first
// chunk back through the router. A load sample is published 1 ms after
// its change, as the live workers debounce, and crosses ZMQ on loopback.
var DefaultNetwork = sim.Network{
	RequestDelay:    sim.Duration(750 * time.Microsecond),
	PublishDebounce: sim.Duration(time.Millisecond),
	LoadDelay:       sim.Duration(300 * time.Microsecond),
}

// SimOptions shape a re-simulation.
type SimOptions struct {
	// Network replaces the rebuilt scenario's network; the zero value
	// takes DefaultNetwork. Fields left zero take the simulator's
	// defaults.
	Network sim.Network
	// Picker replaces the recorded picker ("" keeps it).
	Picker string
	// SpeedupRatio, when positive, replaces every worker's speedup ratio
	// (the live fleet's is not recorded; the fidelity test runs it at 1).
	SpeedupRatio float64
	// Version is written into the simulated run's record.
	Version string
	// Profile, when set, is the engine profile file every worker runs on
	// (the live fleet's, which the recording does not name); the card
	// values recorded still set the scheduler and KV capacity.
	Profile string
}

// Resimulate simulates run liveRun of the recording at path: the fleet
// rebuilt from its discovery records with their instance ids and card
// values, the recorded requests at their recorded arrival offsets. The
// simulated run is appended to the same file, and its id returned.
func Resimulate(path string, liveRun int64, o SimOptions) (int64, error) {
	rd, err := recorder.Open(path)
	if err != nil {
		return 0, err
	}
	res, err := replay.PrepareResimulation(rd, liveRun)
	rd.Close()
	if err != nil {
		return 0, err
	}
	sc := res.Scenario
	sc.Name = fmt.Sprintf("re-simulation of run %d", res.Run.ID)
	sc.Network = o.Network
	if sc.Network == (sim.Network{}) {
		sc.Network = DefaultNetwork
	}
	if o.Picker != "" {
		sc.Picker = o.Picker
	}
	if o.SpeedupRatio > 0 {
		for i := range sc.Fleet {
			sc.Fleet[i].SpeedupRatio = o.SpeedupRatio
		}
	}
	if o.Profile != "" {
		if err := sim.WithProfile(sc, o.Profile); err != nil {
			return 0, err
		}
	}
	if sc, err = sim.Normalize(sc); err != nil {
		return 0, err
	}
	w, err := recorder.Create(path, recorder.Run{Kind: "sim", Scenario: sc.YAML(), Seed: sc.Seed, Version: o.Version,
		Picker: sc.Picker, Start: time.Now()}, recorder.Options{Block: true})
	if err != nil {
		return 0, err
	}
	r, err := sim.New(sc, sim.Options{Record: w, Source: res.Source()})
	if err != nil {
		_, _ = w.Close()
		return 0, err
	}
	_, runErr := r.Execute()
	_, closeErr := w.Close()
	if runErr != nil {
		return 0, runErr
	}
	if closeErr != nil {
		return 0, closeErr
	}
	return w.RunID(), nil
}
