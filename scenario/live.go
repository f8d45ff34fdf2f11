package scenario

import (
	"context"
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
