package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScenarioRunExitStatusAndJUnit(t *testing.T) {
	good, err := os.ReadFile("../../scenario/testdata/stall.yaml")
	require.NoError(t, err)
	dir := t.TempDir()
	pass := filepath.Join(dir, "pass.yaml")
	require.NoError(t, os.WriteFile(pass, good, 0o644))
	junit := filepath.Join(dir, "out", "junit.xml")
	report := filepath.Join(dir, "report")

	out, err := run(t, "scenario", "run", pass, "--junit", junit, "--report", report)
	require.NoError(t, err, out)
	assert.Contains(t, out, "PASS  test-stall (sim, 6 expectations, 300/300 served")
	assert.Contains(t, out, "1 passed, 0 failed, 0 skipped")
	x, err := os.ReadFile(junit)
	require.NoError(t, err)
	assert.Contains(t, string(x), `tests="6" failures="0"`)
	for _, f := range []string{"index.html", "test-stall/index.html", "test-stall/result.json", "test-stall/sim.db"} {
		_, err := os.Stat(filepath.Join(report, f))
		assert.NoError(t, err, f)
	}

	// A failing expectation: exit status 1, the expectation named.
	failing := strings.Replace(string(good), "min: 100\n", "min: 100000\n", 1)
	require.NotEqual(t, string(good), failing)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fail.yaml"), []byte(failing), 0o644))
	out, err = run(t, "scenario", "run", dir, "--junit", junit)
	var ee *exitError
	require.True(t, errors.As(err, &ee), "%v", err)
	assert.Equal(t, 1, ee.code)
	assert.Contains(t, out, `expectation "counter selection.decode.load >= 100000" FAILED`)
	assert.Contains(t, out, "1 passed, 1 failed, 0 skipped (2 scenario files)")
	x, err = os.ReadFile(junit)
	require.NoError(t, err)
	assert.Contains(t, string(x), `tests="12" failures="1" errors="0"`)
}

func TestScenarioValidateReportsFieldPaths(t *testing.T) {
	bad := writeFile(t, "bad.yaml", `
version: 1
fleet: [{role: aggregated, count: 2}]
workload: {poisson: {rate: 10, count: 10, prompt: {min: 1, max: 2}, output: {min: 1, max: 2}}}
expect:
  - no_picks: {worker: 5}
  - metric: ttft_p90
    max: 0.3
`)
	out, err := run(t, "scenario", "validate", bad)
	require.Error(t, err)
	assert.Contains(t, out, "expect[0].no_picks.worker: no worker 5 (the fleet has 2)")
	assert.Contains(t, out, "expect[1].max: ttft_p90 is a latency")

	newer := writeFile(t, "v2.yaml", "version: 2\nfleet: [{role: aggregated, count: 1}]\nworkload: {poisson: {rate: 1, count: 1, prompt: {min: 1, max: 2}, output: {min: 1, max: 2}}}\n")
	out, err = run(t, "scenario", "validate", newer)
	require.Error(t, err)
	assert.Contains(t, out, "version: this build reads scenario format versions up to 1, got 2")

	out, err = run(t, "scenario", "validate", "../../scenario/testdata")
	require.NoError(t, err, out)
	assert.Contains(t, out, "2 scenario files are valid")
}
