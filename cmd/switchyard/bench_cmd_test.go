package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// benchSummary is the part of summary.json these tests read.
type benchSummary struct {
	Fleet       string `json:"fleet"`
	Seed        uint64 `json:"seed"`
	SeedSource  string `json:"seed_source"`
	FleetConfig struct {
		Workers []struct {
			Role          string `json:"role"`
			Count         int    `json:"count"`
			TotalKVBlocks int    `json:"total_kv_blocks"`
			BlockSize     int    `json:"block_size"`
		} `json:"workers"`
		Network struct {
			LoadDelayMs float64 `json:"load_delay_ms"`
			LoadLoss    float64 `json:"load_loss"`
		} `json:"network"`
		Router struct {
			KV struct {
				OverlapScoreCredit float64 `json:"overlap_score_credit"`
			} `json:"kv"`
		} `json:"router"`
	} `json:"fleet_config"`
	Router map[string]struct {
		Picker   string `json:"picker"`
		KVScored bool   `json:"kv_scored"`
		KV       struct {
			PrefillLoadScale   float64 `json:"prefill_load_scale"`
			TrackActiveBlocks  bool    `json:"track_active_blocks"`
			TrackPrefillTokens bool    `json:"track_prefill_tokens"`
		} `json:"kv"`
		Replicas int `json:"replicas"`
	} `json:"router"`
	Pickers map[string]struct {
		Requests int `json:"requests"`
	} `json:"pickers"`
}

func benchRun(t *testing.T, args ...string) (benchSummary, []byte, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "report")
	out, err := run(t, append([]string{"bench", "pickers", "--pickers", "round_robin,load", "--out", dir}, args...)...)
	require.NoError(t, err, out)
	raw, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	require.NoError(t, err)
	var sum benchSummary
	require.NoError(t, json.Unmarshal(raw, &sum))
	return sum, raw, out
}

func TestBenchScenarioKeepsTheScenarioSeedUnlessSeedIsGiven(t *testing.T) {
	sc := writeFile(t, "s.yaml", simScenario) // seed: 4
	sum, _, out := benchRun(t, "--scenario", sc)
	assert.Equal(t, uint64(4), sum.Seed)
	assert.Equal(t, "scenario file", sum.SeedSource)
	assert.Contains(t, out, "seed: 4 (scenario file)")

	sum, _, out = benchRun(t, "--scenario", sc, "--seed", "9")
	assert.Equal(t, uint64(9), sum.Seed)
	assert.Equal(t, "--seed", sum.SeedSource)
	assert.Contains(t, out, "seed: 9 (--seed)")
}

func TestBenchFleetFileNeedsNoWorkload(t *testing.T) {
	fleet := writeFile(t, "fleet.yaml", "seed: 5\nfleet:\n  - {role: aggregated, count: 2, total_kv_blocks: 4096}\n")
	sum, _, _ := benchRun(t, "--trace", miniTrace(t, 20), "--fleet", fleet)
	require.Len(t, sum.Pickers, 2)
	assert.Equal(t, 20, sum.Pickers["load"].Requests)
	assert.Equal(t, uint64(5), sum.Seed, "the fleet file's seed")
	assert.Equal(t, "fleet file", sum.SeedSource)
}

func TestBenchSummaryDescribesTheFleetsKnobs(t *testing.T) {
	trace := miniTrace(t, 20)
	small := writeFile(t, "small.yaml", "fleet:\n  - {role: aggregated, count: 2, total_kv_blocks: 512}\n")
	lossy := writeFile(t, "lossy.yaml", "fleet:\n  - {role: aggregated, count: 2, total_kv_blocks: 512}\nnetwork: {load_delay: 4ms, load_loss: 0.25}\n")
	a, rawA, _ := benchRun(t, "--trace", trace, "--fleet", small)
	b, rawB, _ := benchRun(t, "--trace", trace, "--fleet", lossy)

	require.Len(t, a.FleetConfig.Workers, 1)
	assert.Equal(t, "aggregated", a.FleetConfig.Workers[0].Role)
	assert.Equal(t, 2, a.FleetConfig.Workers[0].Count)
	assert.Equal(t, 512, a.FleetConfig.Workers[0].TotalKVBlocks)
	assert.Equal(t, 64, a.FleetConfig.Workers[0].BlockSize, "defaults are filled in")
	assert.Equal(t, 1.0, a.FleetConfig.Router.KV.OverlapScoreCredit)
	assert.Equal(t, 0.2, a.FleetConfig.Network.LoadDelayMs)
	assert.Equal(t, 4.0, b.FleetConfig.Network.LoadDelayMs)
	assert.Equal(t, 0.25, b.FleetConfig.Network.LoadLoss)
	assert.NotEqual(t, a.Fleet, b.Fleet, "the one-line description tells the runs apart too")
	assert.Contains(t, a.Fleet, "512 KV blocks")

	// --workers runs say the same of their default engine model.
	w, _, _ := benchRun(t, "--trace", trace, "--workers", "3")
	require.Len(t, w.FleetConfig.Workers, 1)
	assert.Equal(t, 3, w.FleetConfig.Workers[0].Count)
	assert.Equal(t, 16384, w.FleetConfig.Workers[0].TotalKVBlocks)
	assert.Equal(t, "default", w.SeedSource)
	assert.NotEqual(t, string(rawA), string(rawB))
}

// Every picker's router settings are in the summary: the fleet file's
// dynamo.kv knobs, and the tracking the *_tracked pickers force on.
func TestBenchSummaryCarriesEachPickersRouter(t *testing.T) {
	trace := miniTrace(t, 12)
	fleet := writeFile(t, "fleet.yaml", "fleet:\n  - {role: aggregated, count: 2, total_kv_blocks: 512}\nrouter:\n  kv: {prefill_load_scale: 4}\n")
	dir := filepath.Join(t.TempDir(), "report")
	out, err := run(t, "bench", "pickers", "--pickers", "round_robin,kv,kv_tracked", "--out", dir, "--trace", trace, "--fleet", fleet)
	require.NoError(t, err, out)
	raw, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	require.NoError(t, err)
	var sum benchSummary
	require.NoError(t, json.Unmarshal(raw, &sum))
	require.Len(t, sum.Router, 3)
	rr, kv, tracked := sum.Router["round_robin"], sum.Router["kv"], sum.Router["kv_tracked"]
	assert.Equal(t, "round_robin", rr.Picker)
	assert.False(t, rr.KVScored)
	assert.True(t, kv.KVScored)
	assert.Equal(t, 4.0, kv.KV.PrefillLoadScale)
	assert.False(t, kv.KV.TrackActiveBlocks)
	assert.Equal(t, "kv_tracked", tracked.Picker)
	assert.True(t, tracked.KV.TrackActiveBlocks && tracked.KV.TrackPrefillTokens, "forced on by the picker")
	assert.Equal(t, 1, tracked.Replicas)
}

// A --trace name that is not a file here is looked up in the trace
// directory; one found nowhere is refused with where to put it.
func TestBenchTraceFoundInTheTraceDirectory(t *testing.T) {
	trace := miniTrace(t, 20)
	t.Setenv("SWITCHYARD_TRACE_DIR", filepath.Dir(trace))
	sum, _, _ := benchRun(t, "--trace", filepath.Base(trace), "--workers", "2")
	assert.Equal(t, 20, sum.Pickers["load"].Requests)

	out, err := run(t, "bench", "pickers", "--trace", "no-such-trace.jsonl", "--workers", "2", "--out", t.TempDir())
	require.Error(t, err, out)
	assert.Contains(t, err.Error()+out, "SWITCHYARD_TRACE_DIR")
}

func TestBenchPickersAcceptsTheExamplePolicyByName(t *testing.T) {
	sc := writeFile(t, "s.yaml", simScenario)
	dir := filepath.Join(t.TempDir(), "report")
	out, err := run(t, "bench", "pickers", "--scenario", sc, "--pickers", "least_kv_blocks,load", "--out", dir)
	require.NoError(t, err, out)
	raw, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	require.NoError(t, err)
	var sum benchSummary
	require.NoError(t, json.Unmarshal(raw, &sum))
	require.Contains(t, sum.Pickers, "least_kv_blocks")
	assert.Equal(t, sum.Pickers["load"].Requests, sum.Pickers["least_kv_blocks"].Requests)
	assert.Positive(t, sum.Pickers["least_kv_blocks"].Requests)
	at := strings.Index(out, "picker ")
	require.GreaterOrEqual(t, at, 0, out)
	table := out[at:]
	lines := strings.Split(table, "\n")
	require.GreaterOrEqual(t, len(lines), 3, out)
	assert.Len(t, lines[1], len(lines[0]), "the table's columns line up under a long picker name:\n%s", table)
	assert.Len(t, lines[2], len(lines[0]), table)

	_, err = run(t, "bench", "pickers", "--scenario", sc, "--pickers", "fastest", "--out", t.TempDir())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "least_kv_blocks", "the error lists the registered names")
}
