package scenario

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"switchyard/router/picker"
	"switchyard/scenario/expect"
)

const suiteDir = "../scenarios/suite"

// The bundled suite passes on the real router, in file order and in
// parallel, as `switchyard scenario run scenarios/suite` runs it.
func TestSuitePassesOnTheRealRouter(t *testing.T) {
	files, err := Files([]string{suiteDir})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 25 {
		t.Fatalf("the suite has %d scenarios, want at least 25", len(files))
	}
	for _, r := range RunAll(context.Background(), files, Options{Mode: Sim}, nil) {
		if r.Failed() {
			var b strings.Builder
			Print(&b, r)
			t.Errorf("%s", b.String())
		}
	}
}

// A router whose picker ignores load signals, stalls and cache state (the
// round-robin picker) fails the suite's routing expectations, each failure
// naming the expectation that caught it.
func TestSuiteCatchesABrokenRouter(t *testing.T) {
	caught := map[string]string{
		"load-stall-sit-out.yaml":   "no picks of worker 1",
		"load-partition-heal.yaml":  "no picks of worker 1",
		"dp-ranks.yaml":             "no picks of worker 1",
		"worker-slow.yaml":          "e2e_p90 <=",
		"worker-fail.yaml":          "failed >=",
		"kv-shared-prefix.yaml":     "cache_hit_ratio >=",
		"discovery-kill-lease.yaml": "served_ratio >=",
	}
	for file, title := range caught {
		r := RunFile(context.Background(), filepath.Join(suiteDir, file), Options{Mode: Sim, brokenPicker: picker.NameRoundRobin})
		if r.Error != "" || r.Sim == nil || r.Sim.Error != "" {
			t.Fatalf("%s: %+v", file, r)
		}
		found := false
		for _, v := range expect.Failed(r.Sim.Verdicts) {
			found = found || strings.Contains(v.Message(), title)
		}
		if !found {
			t.Errorf("%s: the broken router was not caught by %q; failed: %v", file, title, expect.Failed(r.Sim.Verdicts))
		}
	}
}
