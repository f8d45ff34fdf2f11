package replay

import (
	"path/filepath"
	"testing"
	"time"

	"switchyard/recorder"
	"switchyard/sim"
	"switchyard/sim/stats"
)

// A KV run whose groups share long prefixes, so the cache serves a good
// share of the prompt tokens.
const kvScenarioYAML = `
seed: 5
picker: kv
fleet:
  - {role: aggregated, count: 3, total_kv_blocks: 1024}
workload:
  shared_prefix: {groups: 6, users_per_group: 4, system_tokens: 2048, question_tokens: 128, output: {min: 4, max: 24}, rate: 20, count: 200}
`

// recordWithStats simulates src into a recording on disk and returns the
// simulation's own summary of the run beside it.
func recordWithStats(t *testing.T, src string) (string, stats.Summary) {
	t.Helper()
	sc, err := sim.ParseScenario([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "run.db")
	w, err := recorder.Create(path, recorder.Run{Kind: "sim", Scenario: sc.YAML(), Seed: sc.Seed, Picker: sc.Picker, Start: time.Now()},
		recorder.Options{Block: true})
	if err != nil {
		t.Fatal(err)
	}
	col := stats.NewCollector(stats.SLO{TTFT: sc.SLO.TTFT.Std(), ITL: sc.SLO.ITL.Std()})
	r, err := sim.New(sc, sim.Options{Record: w, Observer: sim.Collect(col)})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := r.Execute()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, col.Summary(sum.Virtual)
}

func TestCounterfactualReportsTheRecordedHitRatio(t *testing.T) {
	path, own := recordWithStats(t, kvScenarioYAML)
	if own.HitRatio < 0.2 {
		t.Fatalf("the KV run itself hit only %.3f of its prompt tokens", own.HitRatio)
	}
	cf, err := Counterfactual(open(t, path), 0, "round_robin")
	if err != nil {
		t.Fatal(err)
	}
	rec := cf.Recorded
	if rec.HitRatio != own.HitRatio || rec.PromptTokens != own.PromptTokens || rec.CachedTokens != own.CachedTokens {
		t.Fatalf("recorded hit ratio %.6f (%d of %d tokens), the simulation's own %.6f (%d of %d)",
			rec.HitRatio, rec.CachedTokens, rec.PromptTokens, own.HitRatio, own.CachedTokens, own.PromptTokens)
	}
	if cf.Baseline.HitRatio != own.HitRatio {
		t.Errorf("re-simulated under kv: hit ratio %.6f, recorded %.6f", cf.Baseline.HitRatio, own.HitRatio)
	}
	if rec.Reasons["kv_aware"] == 0 || rec.Reasons["kv_aware"] != own.Reasons["kv_aware"] {
		t.Errorf("recorded reasons %v, the simulation's own %v", rec.Reasons, own.Reasons)
	}
	if len(rec.Series.HitRatio) == 0 || len(own.Series.HitRatio) != len(rec.Series.HitRatio) ||
		rec.Series.HitRatio[len(rec.Series.HitRatio)-1].Y != own.Series.HitRatio[len(own.Series.HitRatio)-1].Y {
		t.Errorf("the recorded hit-ratio series does not end where the simulation's does")
	}
}
