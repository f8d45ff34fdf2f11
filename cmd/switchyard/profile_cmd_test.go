package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shippedProfile is the Llama-3.1-8B on one H100 profile, from this
// package's folder.
const shippedProfile = "../../profiles/llama-3.1-8b-h100-tp1.json"

// sim --profile runs every worker on the profile: the scenario's card
// values left out come from it, so the run differs from the mocker's, and
// prompts beyond its max_model_len are refused.
func TestSimRunsEveryWorkerOnAProfile(t *testing.T) {
	sc := writeFile(t, "s.yaml", simScenario)
	mocker, err := run(t, "sim", "--scenario", sc, "--json")
	require.NoError(t, err, mocker)
	onProfile, err := run(t, "sim", "--scenario", sc, "--profile", shippedProfile, "--json")
	require.NoError(t, err, onProfile)
	// The progress bar shares the output; the JSON follows it.
	jsonOf := func(out string) string { return out[strings.Index(out, "{\n"):] }
	var a, b simResult
	require.NoError(t, json.Unmarshal([]byte(jsonOf(mocker)), &a))
	require.NoError(t, json.Unmarshal([]byte(jsonOf(onProfile)), &b))
	assert.Equal(t, 150, b.Run.Served)
	assert.NotEqual(t, a.Stats.TTFT, b.Stats.TTFT, "the profile's timing prices the steps")

	long := writeFile(t, "long.yaml", `
fleet: [{role: aggregated, count: 1}]
workload:
  poisson: {rate: 5, count: 4, prompt: {min: 9000, max: 9000}, output: {min: 4, max: 4}}
`)
	out, err := run(t, "sim", "--scenario", long, "--profile", shippedProfile)
	require.NoError(t, err, out)
	assert.Contains(t, out, "4 requests (0 served, 4 failed", "beyond max_model_len 8,192")

	_, err = run(t, "sim", "--scenario", sc, "--profile", filepath.Join(t.TempDir(), "none.json"))
	requireExit1(t, err)
	assert.ErrorContains(t, err, "fleet[0].engine.profile")
}

// bench pickers --profile names the profile in the report's fleet.
func TestBenchPickersOnAProfile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "report")
	out, err := run(t, "bench", "pickers", "--trace", miniTrace(t, 40), "--workers", "2", "--pickers", "load",
		"--profile", shippedProfile, "--out", dir)
	require.NoError(t, err, out)
	raw, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	require.NoError(t, err)
	var sum struct {
		Fleet       string `json:"fleet"`
		FleetConfig struct {
			Workers []struct {
				BlockSize     int    `json:"block_size"`
				ContextLength int    `json:"context_length"`
				Engine        string `json:"engine_profile"`
			} `json:"workers"`
		} `json:"fleet_config"`
	}
	require.NoError(t, json.Unmarshal(raw, &sum))
	require.Len(t, sum.FleetConfig.Workers, 1)
	w := sum.FleetConfig.Workers[0]
	assert.Equal(t, "llama-3.1-8b-h100-tp1", w.Engine)
	assert.Equal(t, 16, w.BlockSize)
	assert.Equal(t, 8192, w.ContextLength)
	assert.Contains(t, sum.Fleet, "profile llama-3.1-8b-h100-tp1")

	// Without a profile the key is left out, so earlier reports keep
	// their bytes.
	plain := filepath.Join(t.TempDir(), "plain")
	out, err = run(t, "bench", "pickers", "--trace", miniTrace(t, 10), "--workers", "1", "--pickers", "load", "--out", plain)
	require.NoError(t, err, out)
	raw, err = os.ReadFile(filepath.Join(plain, "summary.json"))
	require.NoError(t, err)
	assert.False(t, bytes.Contains(raw, []byte("engine_profile")))
}

// A fleet file names its profile beside it; config validate loads it, and
// refuses one with simple workers or one that does not load.
func TestFleetFileProfile(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(shippedProfile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "h100.json"), data, 0o600))
	base := "etcd: {endpoints: [\"127.0.0.1:2379\"]}\nfrontend: \"127.0.0.1:0\"\nmodel: m\nworkers: {aggregated: 1}\n"
	write := func(extra string) string {
		p := filepath.Join(dir, "fleet.yaml")
		require.NoError(t, os.WriteFile(p, []byte(base+extra), 0o600))
		return p
	}
	out, err := run(t, "config", "validate", write("profile: h100.json\n"))
	require.NoError(t, err, out)
	assert.Equal(t, "fleet config OK (0 warnings)\n", out)

	for extra, want := range map[string]string{
		"profile: missing.json\n":                    "error: profile: ",
		"profile: h100.json\nsimple_workers: true\n": "error: profile: simple_workers do not run on a profile",
		"profile: fleet.yaml\n":                      "error: profile: ",
	} {
		out, err := run(t, "config", "validate", write(extra))
		requireExit1(t, err)
		assert.Contains(t, out, want, extra)
	}
	ff, err := loadFleetFile(write("profile: h100.json\n"))
	require.NoError(t, err)
	p, err := ff.profile()
	require.NoError(t, err)
	assert.Equal(t, "llama-3.1-8b-h100-tp1", p.Name)
}

// demo --profile runs the fake workers on the profile and says so.
func TestDemoOnAProfile(t *testing.T) {
	d := startTestDemoWith(t, demoOptions{addr: "127.0.0.1:0", prefills: 2, decodes: 2, speedup: 10, drain: 0,
		profile: shippedProfile})
	var out bytes.Buffer
	d.printBanner(&out)
	assert.Contains(t, out.String(), "on engine profile llama-3.1-8b-h100-tp1")
	admin := adminClient{base: d.base(), token: d.token}
	_, body := admin.workers(t)
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"context_length":8192`, "the cards advertise the profile's max_model_len")

	_, err = startDemo(t.Context(), demoOptions{addr: "127.0.0.1:0", profile: filepath.Join(t.TempDir(), "none.json")}, nil)
	require.ErrorContains(t, err, "--profile")
}
