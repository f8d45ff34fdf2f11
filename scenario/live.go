package scenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"switchyard/scenario/live"
	"switchyard/sim"
)

// runLive runs sc against real parts on loopback (scenario/live) and
// judges the router's recording of it. A scenario live mode cannot
// reproduce is skipped, with the reasons.
func runLive(ctx context.Context, sc *sim.Scenario, o Options, recordPath string) *ModeResult {
	m := &ModeResult{Mode: string(Live)}
	if err := live.Supported(sc); err != nil {
		m.Skipped = err.Error()
		return m
	}
	start := time.Now()
	defer func() { m.Wall = time.Since(start) }()
	if recordPath == "" {
		dir, err := os.MkdirTemp("", "switchyard-live-")
		if err != nil {
			m.Error = err.Error()
			return m
		}
		defer os.RemoveAll(dir)
		recordPath = filepath.Join(dir, "live.db")
	} else {
		_ = os.Remove(recordPath)
	}
	info, err := live.Run(ctx, sc, live.Options{RecordPath: recordPath, Log: o.Log, TimeScale: o.TimeScale})
	if err != nil {
		m.Error = err.Error()
		return m
	}
	ev, err := evidenceFromRecording(recordPath, info.RunID, info.Start, info.WorkerIDs, sloOf(sc), info.TimeScale)
	if err != nil {
		m.Error = "reading the live recording: " + err.Error()
		return m
	}
	// The direct-mode frontend reports no cached tokens, so a live run
	// cannot tell how much of a prompt its worker had cached.
	ev.Unobserved = map[string]string{"cache_hit_ratio": "a live run does not observe cached tokens (the frontend does not report them)"}
	m.Notes = faultNotes(info, sc)
	m.Requests = info.Requests
	for _, r := range ev.Requests {
		if r.Status == "ok" {
			m.Served++
		}
	}
	m.evidence = ev
	m.Verdicts = expectations(sc, ev)
	return m
}

// lateFault is how late a live fault may be injected before the result
// says so: expectations are written in scenario time, so a fault the
// machine injected late moves every window after it.
const lateFault = 250 * time.Millisecond

// faultNotes says which faults a live run could not inject on time, or
// at all.
func faultNotes(info live.Info, sc *sim.Scenario) []string {
	var notes []string
	for _, f := range info.Faults {
		want := info.Start.Add(time.Duration(float64(f.Fault.At.Std()) / info.TimeScale))
		switch late := f.At.Sub(want); {
		case f.Err != "":
			notes = append(notes, fmt.Sprintf("%s at %s was refused: %s", f.Kind, f.Fault.At.Std(), f.Err))
		case late > lateFault:
			notes = append(notes, fmt.Sprintf("%s at %s was injected %s late (a loaded machine)", f.Kind, f.Fault.At.Std(),
				late.Round(time.Millisecond)))
		}
	}
	return notes
}
