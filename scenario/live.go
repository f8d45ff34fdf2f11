package scenario

import (
	"context"

	"switchyard/sim"
)

// runLive runs sc live; wired to scenario/live.
func runLive(ctx context.Context, sc *sim.Scenario, o Options, recordPath string) *ModeResult {
	return &ModeResult{Mode: string(Live), Skipped: "live mode is not built yet"}
}
