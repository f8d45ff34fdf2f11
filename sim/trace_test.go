package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"switchyard/internal/traces"
	"switchyard/sim/workload"
)

// writeTrace writes a generated trace of n requests to dir/name.
func writeTrace(t *testing.T, dir, name string, n int) {
	t.Helper()
	cfg := workload.DefaultSynthTrace()
	cfg.Requests = n
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := workload.WriteSynthTrace(f, cfg, 1); err != nil {
		t.Fatal(err)
	}
}

// loadTraceScenario writes a scenario replaying trace path into dir and loads it.
func loadTraceScenario(t *testing.T, dir, path string) *Scenario {
	t.Helper()
	file := filepath.Join(dir, "scenario.yaml")
	body := "fleet: [{role: aggregated, count: 2}]\nworkload: {trace: {path: " + path + "}}\n"
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := LoadScenario(file)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// requestsFrom counts the requests the scenario's workload yields.
func requestsFrom(t *testing.T, sc *Scenario) int {
	t.Helper()
	src, closer, err := sc.Source()
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	n := 0
	for _, ok := src.Next(); ok; _, ok = src.Next() {
		n++
	}
	return n
}

// A relative trace path is looked for beside the scenario first, then in
// the trace directory.
func TestTracePathResolution(t *testing.T) {
	scenarioDir, traceDir := t.TempDir(), t.TempDir()
	t.Setenv(traces.EnvDir, traceDir)
	writeTrace(t, traceDir, "conv.jsonl", 30)

	sc := loadTraceScenario(t, scenarioDir, "conv.jsonl")
	if got := requestsFrom(t, sc); got != 30 || sc.ExpectedRequests() != 30 {
		t.Fatalf("from the trace directory: %d requests, %d expected; want 30", got, sc.ExpectedRequests())
	}

	writeTrace(t, scenarioDir, "conv.jsonl", 5)
	if got := requestsFrom(t, sc); got != 5 || sc.ExpectedRequests() != 5 {
		t.Fatalf("a trace beside the scenario comes first: %d requests, %d expected; want 5", got, sc.ExpectedRequests())
	}

	abs := filepath.Join(traceDir, "conv.jsonl")
	if got := requestsFrom(t, loadTraceScenario(t, scenarioDir, abs)); got != 30 {
		t.Fatalf("an absolute path: %d requests, want 30", got)
	}
}

func TestMissingTraceSaysWhereToGetIt(t *testing.T) {
	scenarioDir, traceDir := t.TempDir(), t.TempDir()
	t.Setenv(traces.EnvDir, traceDir)
	sc := loadTraceScenario(t, scenarioDir, traces.Mooncake)
	_, _, err := sc.Source()
	if err == nil {
		t.Fatal("a missing trace was opened")
	}
	for _, want := range []string{filepath.Join(scenarioDir, traces.Mooncake), filepath.Join(traceDir, traces.Mooncake),
		"kvcache-ai/Mooncake", traces.EnvDir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if n := sc.ExpectedRequests(); n != 0 {
		t.Fatalf("ExpectedRequests of a missing trace = %d", n)
	}
}

// The bundled Mooncake scenario names its trace, which the trace directory
// provides (here a generated stand-in under the Mooncake file name).
func TestMooncakeScenarioFindsItsTraceByName(t *testing.T) {
	traceDir := t.TempDir()
	t.Setenv(traces.EnvDir, traceDir)
	writeTrace(t, traceDir, traces.Mooncake, 12)
	sc, err := LoadScenario("../scenarios/mooncake-16.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := requestsFrom(t, sc); got != 12 {
		t.Fatalf("%d requests from the stand-in trace, want 12", got)
	}
}

// The synthetic-trace scenario replays a trace the project generated and
// ships, so it runs on any clone, whatever the trace directory holds.
func TestSyntheticTraceScenarioRuns(t *testing.T) {
	t.Setenv(traces.EnvDir, t.TempDir())
	sc, err := LoadScenario("../scenarios/synthetic-trace.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := execute(t, sc, Options{})
	if s.Requests != 200 || s.Served != s.Requests || sc.ExpectedRequests() != 200 {
		t.Fatalf("%+v (expected %d requests)", s, sc.ExpectedRequests())
	}
}
