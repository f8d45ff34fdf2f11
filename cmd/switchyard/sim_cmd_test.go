package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const simScenario = `
name: cli
seed: 4
fleet:
  - {role: aggregated, count: 3}
workload:
  poisson: {rate: 30, count: 150, prompt: {min: 100, max: 1500}, output: {min: 4, max: 40}}
`

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

func TestSimRecordThenReplay(t *testing.T) {
	sc := writeFile(t, "s.yaml", simScenario)
	db := filepath.Join(t.TempDir(), "run.db")
	out, err := run(t, "sim", "--scenario", sc, "--record", db)
	require.NoError(t, err, out)
	assert.Contains(t, out, "150 requests (150 served, 0 failed, 0 refused)")
	assert.Contains(t, out, "(0 dropped)")

	out, err = run(t, "replay", db)
	require.NoError(t, err, out)
	assert.Contains(t, out, "reproduced 150 (100.00%)")
	assert.Contains(t, out, "every selection reproduced")

	out, err = run(t, "replay", db, "--picker", "random", "--json")
	require.NoError(t, err, out, "another picker's disagreement is a report, not a failure")
	var rep struct {
		Selections, Reproduced int
		Picker                 string `json:"picker"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, 150, rep.Selections)
	assert.Less(t, rep.Reproduced, 150)
	assert.Equal(t, "random", rep.Picker)

	out, err = run(t, "replay", db, "--counterfactual", "round_robin")
	require.NoError(t, err, out)
	assert.Contains(t, out, "re-simulated, round_robin")
}

// The shipped broker scenario prints what its brokers did, and its
// recording replays every selection.
func TestSimOfTheBrokerScenarioRecordsAndReplays(t *testing.T) {
	db := filepath.Join(t.TempDir(), "run.db")
	out, err := run(t, "sim", "--scenario", "../../scenarios/broker-failover.yaml", "--record", db)
	require.NoError(t, err, out)
	assert.Contains(t, out, "1000 requests (1000 served, 0 failed, 0 refused)")
	assert.Contains(t, out, "brokers: broker-a down, 2 sessions,")
	assert.Contains(t, out, "; broker-b live, 2 sessions,")
	assert.Contains(t, out, "pending 2 times for")
	assert.Contains(t, out, ", 0 still pending")

	out, err = run(t, "replay", db)
	require.NoError(t, err, out)
	assert.Contains(t, out, "reproduced 1000 (100.00%)")
}

func TestReplayOfAMissingFileFails(t *testing.T) {
	_, err := run(t, "replay", filepath.Join(t.TempDir(), "nope.db"))
	var ee *exitError
	require.True(t, errors.As(err, &ee), "%v", err)
	assert.Equal(t, 2, ee.code)
}

func TestSimRefusesABadScenario(t *testing.T) {
	sc := writeFile(t, "s.yaml", "fleet: []\nworkload: {}\n")
	_, err := run(t, "sim", "--scenario", sc)
	requireExit1(t, err)
	assert.Contains(t, err.Error(), "at least one worker group")
}

// miniTrace writes a Mooncake-format trace whose requests share prefixes.
func miniTrace(t *testing.T, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": 2048, "output_length": 20, "hash_ids": [%d, %d, %d, %d]}`+"\n",
			i*50, i%5, 100+i%7, 1000+i, 2000+i)
	}
	return writeFile(t, "trace.jsonl", b.String())
}

func TestBenchPickersWritesTheReportFolder(t *testing.T) {
	trace := miniTrace(t, 120)
	dir := filepath.Join(t.TempDir(), "report")
	out, err := run(t, "bench", "pickers", "--trace", trace, "--workers", "4", "--pickers", "round_robin,random,load", "--out", dir)
	require.NoError(t, err, out)
	assert.Contains(t, out, filepath.Join(dir, "index.html"))
	for _, f := range []string{"index.html", "summary.md", "summary.json"} {
		_, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	require.NoError(t, err)
	var sum struct {
		Pickers map[string]struct {
			Requests      int                `json:"requests"`
			TTFT          map[string]float64 `json:"ttft_ms"`
			ITL           map[string]float64 `json:"itl_ms"`
			E2E           map[string]float64 `json:"e2e_ms"`
			HitRatio      *float64           `json:"hit_ratio"`
			HitRatioBound *float64           `json:"hit_ratio_bound"`
			Imbalance     *float64           `json:"imbalance"`
		} `json:"pickers"`
	}
	require.NoError(t, json.Unmarshal(raw, &sum))
	require.Len(t, sum.Pickers, 3)
	for name, p := range sum.Pickers {
		assert.Equal(t, 120, p.Requests, name)
		for _, m := range []map[string]float64{p.TTFT, p.ITL, p.E2E} {
			for _, k := range []string{"p50", "p90", "p99"} {
				assert.Greater(t, m[k], 0.0, "%s %s", name, k)
			}
		}
		require.NotNil(t, p.HitRatio)
		require.NotNil(t, p.HitRatioBound)
		require.NotNil(t, p.Imbalance)
		// Equal hash ids share blocks, so the bound is well above zero and
		// no picker can beat it.
		assert.Greater(t, *p.HitRatioBound, 0.2, name)
		assert.LessOrEqual(t, *p.HitRatio, *p.HitRatioBound+1e-9, name)
	}
}

func TestBenchPickersNeedsAFleet(t *testing.T) {
	_, err := run(t, "bench", "pickers", "--trace", miniTrace(t, 3))
	requireExit1(t, err)
	assert.Contains(t, err.Error(), "--fleet")
}

func TestSimUnderTheKVPickerReportsItsCounts(t *testing.T) {
	sc := writeFile(t, "s.yaml", simScenario)
	out, err := run(t, "sim", "--scenario", sc, "--picker", "kv")
	require.NoError(t, err, out)
	assert.Contains(t, out, "150 requests (150 served")
	assert.Regexp(t, `kv: [1-9][0-9]* kv-events messages \(applied [1-9]`, out)

	out, err = run(t, "sim", "--scenario", sc, "--json")
	require.NoError(t, err, out)
	var res struct {
		Core struct {
			LoadMessages map[string]uint64 `json:"load_messages"`
			KVMessages   map[string]uint64 `json:"kv_messages"`
		} `json:"core"`
	}
	// run merges stderr (the progress lines) into the output: the JSON
	// document starts at the first brace.
	require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &res))
	assert.Positive(t, res.Core.LoadMessages["applied"])
	assert.Empty(t, res.Core.KVMessages, "the load picker's router follows no kv-events")
}
