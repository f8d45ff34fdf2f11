package tune

import (
	"switchyard/router/picker"
	"switchyard/sim"
	"switchyard/sim/stats"
	"switchyard/sim/workload"
)

// Workload is what every evaluation replays. Source, when set, makes a
// fresh source of the same requests for each run (recorded requests);
// nil runs the scenario's own workload.
type Workload struct {
	Scenario *sim.Scenario
	Source   func() workload.Source
	// Progress, when set, hears of every request a run ends (it is called
	// from several runs at once).
	Progress func(ended int)
}

// Run simulates the workload once under the named picker with the
// scenario's router.kv replaced by kv, and summarises it.
func (w Workload) Run(pickerName string, kv sim.KVParams) (stats.Summary, error) {
	sc := *w.Scenario
	sc.Picker, sc.Router.KV = pickerName, kv
	col := stats.NewCollector(stats.SLO{TTFT: sc.SLO.TTFT.Std(), ITL: sc.SLO.ITL.Std()})
	opts := sim.Options{Observer: sim.Collect(col)}
	if w.Source != nil {
		opts.Source = w.Source()
	}
	if w.Progress != nil {
		last := 0
		opts.Progress = func(n int) {
			w.Progress(n - last)
			last = n
		}
	}
	run, err := sim.New(&sc, opts)
	if err != nil {
		return stats.Summary{}, err
	}
	sum, err := run.Execute()
	if err != nil {
		return stats.Summary{}, err
	}
	return col.Summary(sum.Virtual), nil
}

// Evaluate is the search's evaluation on this workload: the kv picker
// with the scenario's router.kv and the point's knobs.
func (w Workload) Evaluate() Evaluate {
	return func(s Settings) (stats.Summary, error) {
		return w.Run(picker.NameKV, s.Apply(w.Scenario.Router.KV))
	}
}
