package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/config"
)

// tuneScenario is a small shared-prefix workload on which Dynamo's
// default prefill_load_scale of 1 is poor: sixteen 1,024-token prefixes
// over four workers that each hold an eighth of them.
const tuneScenario = `name: small-shared-prefix
seed: 3
fleet:
  - {role: aggregated, count: 4, block_size: 16, total_kv_blocks: 512}
workload:
  shared_prefix: {groups: 16, users_per_group: 4, system_tokens: 1024, question_tokens: 128, output: {min: 16, max: 48}, rate: 40, count: %d}
`

func tuneScenarioFile(t *testing.T, count int) string {
	return writeFile(t, "shared.yaml", strings.Replace(tuneScenario, "%d", itoa(count), 1))
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

type tuneSearch struct {
	Objective   string `json:"objective"`
	SeedSource  string `json:"seed_source"`
	Current     int    `json:"current"`
	Best        int    `json:"best"`
	Evaluations []struct {
		Phase    string             `json:"phase"`
		Settings map[string]any     `json:"settings"`
		Value    float64            `json:"value"`
		Requests int                `json:"requests"`
		Extra    map[string]float64 `json:"-"`
	} `json:"evaluations"`
}

func readTune(t *testing.T, dir string) (tuneSearch, benchSummary) {
	t.Helper()
	var s tuneSearch
	require.NoError(t, json.Unmarshal(readBytes(t, filepath.Join(dir, "search.json")), &s))
	var sum benchSummary
	require.NoError(t, json.Unmarshal(readBytes(t, filepath.Join(dir, "summary.json")), &sum))
	return s, sum
}

func readBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// The search finds a better setting than the default on a workload where
// the default is known to be poor, writes a dynamo.kv block the router
// accepts, and gives the same bytes with one core as with two.
func TestTuneFindsABetterSettingAndIsDeterministic(t *testing.T) {
	sc := tuneScenarioFile(t, 300)
	one, two := filepath.Join(t.TempDir(), "one"), filepath.Join(t.TempDir(), "two")
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	out, err := run(t, "tune", "--scenario", sc, "--budget", "9", "--parallel", "1", "--out", one)
	require.NoError(t, err, out)
	runtime.GOMAXPROCS(max(prev, 2))
	out, err = run(t, "tune", "--scenario", sc, "--budget", "9", "--parallel", "2", "--out", two)
	require.NoError(t, err, out)
	for _, f := range []string{"tuned.yaml", "search.json", "summary.json", "summary.md", "index.html"} {
		assert.Equal(t, string(readBytes(t, filepath.Join(one, f))), string(readBytes(t, filepath.Join(two, f))), f)
	}
	assert.Contains(t, out, "TTFT p90 (ms):")
	assert.Contains(t, out, "kv_tuned")

	s, sum := readTune(t, two)
	require.Len(t, s.Evaluations, 9)
	assert.Equal(t, "ttft_p90", s.Objective)
	assert.Equal(t, "current", s.Evaluations[0].Phase)
	assert.Equal(t, 1.0, s.Evaluations[0].Settings["prefill_load_scale"])
	best, cur := s.Evaluations[s.Best], s.Evaluations[s.Current]
	assert.Greater(t, best.Settings["prefill_load_scale"].(float64), 1.0)
	assert.Less(t, best.Value, cur.Value/2, "tuned TTFT p90 %.1f ms, current %.1f ms", best.Value, cur.Value)

	// summary.json: the bench pickers schema, the three runs, their knobs.
	assert.Len(t, sum.Pickers, 3)
	for _, name := range []string{"round_robin", "kv", "kv_tuned"} {
		assert.Equal(t, 300, sum.Pickers[name].Requests, name)
	}
	assert.Equal(t, 1.0, sum.Router["kv"].KV.PrefillLoadScale)
	assert.Equal(t, best.Settings["prefill_load_scale"], sum.Router["kv_tuned"].KV.PrefillLoadScale)
	assert.Equal(t, "round_robin", sum.Router["round_robin"].Picker)
	assert.Equal(t, "scenario file", sum.SeedSource)

	// tuned.yaml parses and validates as a router configuration, and says
	// what was found.
	raw := readBytes(t, filepath.Join(two, "tuned.yaml"))
	c, err := config.Parse(raw, nil)
	require.NoError(t, err, string(raw))
	errs, _ := c.Validate()
	assert.Empty(t, errs)
	assert.Equal(t, best.Settings["prefill_load_scale"], c.Dynamo.KV.PrefillLoadScale)
	assert.Equal(t, best.Settings["overlap_score_credit"], c.Dynamo.KV.OverlapScoreCredit)
	assert.Equal(t, best.Settings["track_prefill_tokens"], c.Dynamo.KV.TrackPrefillTokens)
	assert.Contains(t, string(raw), "kv_overlap_score_weight")

	html := string(readBytes(t, filepath.Join(two, "index.html")))
	assert.Contains(t, html, `id="tuning"`)
	assert.Contains(t, html, "by prefill_load_scale")
	assert.Contains(t, html, "<circle")
}

// --recording replays a recording's requests as the traffic, on the fleet
// it describes or on one given; --config's dynamo.kv are the current
// settings.
func TestTuneOnARecording(t *testing.T) {
	db := filepath.Join(t.TempDir(), "run.db")
	out, err := run(t, "sim", "--scenario", tuneScenarioFile(t, 120), "--record", db)
	require.NoError(t, err, out)
	cfg := writeFile(t, "router.yaml", "dynamo:\n  kv:\n    prefill_load_scale: 2\n    overlap_score_credit: 0.5\n")

	dir := filepath.Join(t.TempDir(), "rec")
	out, err = run(t, "tune", "--recording", db, "--config", cfg, "--budget", "8", "--objective", "cache_hit_ratio", "--out", dir)
	require.NoError(t, err, out)
	s, sum := readTune(t, dir)
	assert.Equal(t, "recording", s.SeedSource)
	assert.Equal(t, 2.0, s.Evaluations[0].Settings["prefill_load_scale"])
	assert.Equal(t, 0.5, s.Evaluations[0].Settings["overlap_score_credit"])
	assert.Equal(t, 120, s.Evaluations[0].Requests)
	require.Len(t, sum.FleetConfig.Workers, 1)
	assert.Equal(t, 4, sum.FleetConfig.Workers[0].Count, "the recorded run's fleet")
	assert.Equal(t, 2.0, sum.Router["kv"].KV.PrefillLoadScale)
	assert.GreaterOrEqual(t, s.Evaluations[s.Best].Value, s.Evaluations[s.Current].Value)

	// The same requests on another fleet.
	other := filepath.Join(t.TempDir(), "other")
	out, err = run(t, "tune", "--recording", db, "--workers", "2", "--budget", "8", "--out", other)
	require.NoError(t, err, out)
	_, sum = readTune(t, other)
	assert.Equal(t, 2, sum.FleetConfig.Workers[0].Count)
	assert.Equal(t, 120, sum.Pickers["kv_tuned"].Requests)

	// A recording without token ids hides the shared prefixes: said.
	lengths := filepath.Join(t.TempDir(), "lengths.db")
	out, err = run(t, "sim", "--scenario", tuneScenarioFile(t, 30), "--record", lengths, "--no-tokens")
	require.NoError(t, err, out)
	out, err = run(t, "tune", "--recording", lengths, "--budget", "8", "--out", filepath.Join(t.TempDir(), "lengths"))
	require.NoError(t, err, out)
	assert.Contains(t, out, "warning: 30 of 30 recorded requests have no token ids")
}

func TestTuneRefusesBadFlags(t *testing.T) {
	sc := tuneScenarioFile(t, 20)
	trace := miniTrace(t, 5)
	badCfg := writeFile(t, "bad.yaml", "dynamo:\n  kv:\n    overlap_score_credit: 3\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "give exactly one of --trace FILE, --recording FILE and --scenario FILE"},
		{[]string{"--trace", trace, "--scenario", sc}, "give exactly one of"},
		{[]string{"--trace", trace}, "--trace needs the fleet to run it on: --fleet FILE or --workers N"},
		{[]string{"--trace", trace, "--workers", "2", "--fleet", sc}, "give at most one of --fleet FILE and --workers N"},
		{[]string{"--scenario", sc, "--workers", "2"}, "--scenario takes its fleet from the file"},
		{[]string{"--scenario", sc, "--limit", "3"}, "--limit and --speedup apply to --trace only"},
		{[]string{"--scenario", sc, "--run", "2"}, "--run applies to --recording only"},
		{[]string{"--scenario", sc, "--budget", "2"}, "--budget must be in 8..4096, got 2"},
		{[]string{"--scenario", sc, "--parallel", "0"}, "--parallel must be at least 1, got 0"},
		{[]string{"--trace", trace, "--workers", "2", "--speedup", "0"}, "--speedup must be a positive number, got 0"},
		{[]string{"--scenario", sc, "--objective", "p99"}, `--objective: unknown objective "p99" (known: ttft_p90, ttft_p50, e2e_p90, goodput, cache_hit_ratio)`},
		{[]string{"--scenario", sc, "--objective", "goodput"}, "--objective goodput needs SLO bounds"},
		{[]string{"--scenario", sc, "--config", badCfg}, "dynamo.kv.overlap_score_credit: must be between 0.0 and 1.0"},
		{[]string{"--recording", filepath.Join(t.TempDir(), "missing.db")}, "missing.db"},
	} {
		out, err := run(t, append([]string{"tune", "--out", t.TempDir()}, c.args...)...)
		if assert.Error(t, err, "%v: %s", c.args, out) {
			assert.Contains(t, err.Error(), c.want, c.args)
		}
	}
}
