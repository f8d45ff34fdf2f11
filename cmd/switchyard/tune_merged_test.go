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

// withoutKeys is a JSON object's keys and their exact bytes, but the ones named.
func withoutKeys(t *testing.T, path string, drop ...string) map[string]string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(readBytes(t, path), &m))
	out := map[string]string{}
	for k, v := range m {
		if !strings.Contains(" "+strings.Join(drop, " ")+" ", " "+k+" ") {
			out[k] = string(v)
		}
	}
	return out
}

// The Job's cells, merged, then --from-merged, end where the whole search on one machine
// ends: the same tuned.yaml, search.json and report, byte for byte, the grid's points read
// from the cells and not simulated again (fourteen: the current settings are also the grid's
// 1/1, one point of two cells).
func TestTuneFromMergedIsTheLocalSearch(t *testing.T) {
	sc := tuneScenarioFile(t, 120)
	emit := t.TempDir()
	out, err := run(t, "tune", "--scenario", sc, "--emit-job", emit, "--image", "switchyard:test")
	require.NoError(t, err, out)
	args := jobArgs(t, filepath.Join(emit, "job.yaml"))
	res := t.TempDir()
	for i := range 15 {
		var cell []string
		for _, a := range args {
			a = strings.ReplaceAll(a, "$(JOB_COMPLETION_INDEX)", itoa(i))
			cell = append(cell, strings.Replace(a, "/results/", res+"/", 1))
		}
		out, err := run(t, cell...)
		require.NoError(t, err, out)
	}
	merged := filepath.Join(t.TempDir(), "merged")
	out, err = run(t, "reports", "merge", res, "--out", merged)
	require.NoError(t, err, out)

	cont := filepath.Join(t.TempDir(), "cont")
	out, err = run(t, "tune", "--from-merged", merged, "--out", cont, "--parallel", "2")
	require.NoError(t, err, out)
	assert.Contains(t, out, "14 read from its cells")
	local := filepath.Join(t.TempDir(), "local")
	lo, err := run(t, "tune", "--scenario", sc, "--out", local)
	require.NoError(t, err, lo)

	assert.Equal(t, string(readBytes(t, filepath.Join(local, "tuned.yaml"))), string(readBytes(t, filepath.Join(cont, "tuned.yaml"))))
	assert.Equal(t, withoutKeys(t, filepath.Join(local, "search.json")), withoutKeys(t, filepath.Join(cont, "search.json"), "from_sweep", "reused"))
	assert.Equal(t, withoutKeys(t, filepath.Join(local, "summary.json")), withoutKeys(t, filepath.Join(cont, "summary.json")))
	for _, f := range []string{"summary.md", "index.html"} {
		assert.Equal(t, string(readBytes(t, filepath.Join(local, f))), string(readBytes(t, filepath.Join(cont, f))), f)
	}
	var s struct {
		FromSweep   string `json:"from_sweep"`
		Reused      int    `json:"reused"`
		Evaluations []struct {
			Phase string `json:"phase"`
		} `json:"evaluations"`
	}
	require.NoError(t, json.Unmarshal(readBytes(t, filepath.Join(cont, "search.json")), &s))
	grid := 0
	for _, e := range s.Evaluations {
		if e.Phase != "refine" {
			grid++
		}
	}
	assert.Equal(t, 14, grid)
	assert.Equal(t, grid, s.Reused)
	assert.Len(t, s.FromSweep, 16)
	assert.Greater(t, len(s.Evaluations), grid, "the refinement ran")

	// What the sweep fixed is not given again; the inputs must be the cells'.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--seed", "4"}, "--seed: with --from-merged the workload, fleet and objective are the sweep's"},
		{[]string{"--budget", "12"}, "--budget 12: refining a sweep's grid needs at least 19"},
		{[]string{"--scenario", sc}, "--scenario: with --from-merged"},
	} {
		_, err := run(t, append([]string{"tune", "--from-merged", merged}, c.args...)...)
		requireExit1(t, err)
		assert.Contains(t, err.Error(), c.want)
	}
	require.NoError(t, os.WriteFile(sc, []byte(strings.Replace(string(readBytes(t, sc)), "seed: 3", "seed: 4", 1)), 0o644))
	_, err = run(t, "tune", "--from-merged", merged, "--out", t.TempDir())
	requireExit1(t, err)
	assert.Contains(t, err.Error(), "the files changed since the sweep ran")
	assert.Contains(t, err.Error(), "on seed 3, this search shared.yaml on seed 4")
	_, err = run(t, "tune", "--from-merged", res, "--out", t.TempDir())
	requireExit1(t, err)
	assert.Contains(t, err.Error(), "--from-merged")
}
