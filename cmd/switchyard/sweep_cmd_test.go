package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// sweepArgs is a four-cell bench pickers sweep on a small trace.
func sweepArgs(trace string) []string {
	return []string{"bench", "pickers", "--trace", trace, "--pickers", "round_robin,kv", "--sweep", "seeds=1,2", "--sweep", "workers=2,3"}
}

// runCell runs cell i of the sweep into dir/cell-i.
func runCell(t *testing.T, args []string, dir string, i int) string {
	t.Helper()
	out := filepath.Join(dir, "cell-"+itoa(i))
	o, err := run(t, append(append([]string(nil), args...), "--cell", itoa(i), "--out", out)...)
	require.NoError(t, err, o)
	return out
}

// withoutCell is summary.json's keys and their exact bytes, but "cell".
func withoutCell(t *testing.T, path string) map[string]string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(readBytes(t, path), &m))
	out := map[string]string{}
	for k, v := range m {
		if k != "cell" {
			out[k] = string(v)
		}
	}
	return out
}

// Cell 1 (seed 1, workers 3) writes what the plain run with those flags
// writes, byte for byte, its "cell" aside.
func TestSweepCellIsThePlainRunWithItsFlags(t *testing.T) {
	trace := miniTrace(t, 20)
	dir := t.TempDir()
	cell := runCell(t, sweepArgs(trace), dir, 1)
	plain := filepath.Join(dir, "plain")
	out, err := run(t, "bench", "pickers", "--trace", trace, "--pickers", "round_robin,kv", "--seed", "1", "--workers", "3", "--out", plain)
	require.NoError(t, err, out)

	assert.Equal(t, withoutCell(t, filepath.Join(plain, "summary.json")), withoutCell(t, filepath.Join(cell, "summary.json")))
	for _, f := range []string{"summary.md", "index.html"} {
		assert.Equal(t, string(readBytes(t, filepath.Join(plain, f))), string(readBytes(t, filepath.Join(cell, f))), f)
	}
	var sum struct {
		Cell struct {
			Index       int    `json:"index"`
			Key         string `json:"key"`
			Coordinates []struct{ Name, Value string }
			Sweep       struct {
				ID         string   `json:"id"`
				Kind       string   `json:"kind"`
				Command    []string `json:"command"`
				Cells      int      `json:"cells"`
				Dimensions []struct {
					Name   string   `json:"name"`
					Values []string `json:"values"`
				} `json:"dimensions"`
			} `json:"sweep"`
		} `json:"cell"`
	}
	require.NoError(t, json.Unmarshal(readBytes(t, filepath.Join(cell, "summary.json")), &sum))
	assert.Equal(t, 1, sum.Cell.Index)
	assert.Equal(t, "seed=1,workers=3", sum.Cell.Key)
	assert.Equal(t, 4, sum.Cell.Sweep.Cells)
	assert.Equal(t, "bench pickers", sum.Cell.Sweep.Kind)
	assert.Equal(t, "seed", sum.Cell.Sweep.Dimensions[0].Name, "the plural is the flag's name")
	assert.NotContains(t, strings.Join(sum.Cell.Sweep.Command, " "), "--out", "the command is every cell's")
}

// The merge is the same whatever order the cells are found in, lists
// missing cells and fails without --allow-missing.
func TestSweepMergeIsDeterministicAndReportsMissingCells(t *testing.T) {
	trace := miniTrace(t, 20)
	res := t.TempDir()
	var cells []string
	for i := range 4 {
		cells = append(cells, runCell(t, sweepArgs(trace), res, i))
	}
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	out, err := run(t, "reports", "merge", res, "--out", a)
	require.NoError(t, err, out)
	assert.Contains(t, out, "4 of 4 cells")
	out, err = run(t, "reports", "merge", cells[3], cells[1], cells[2], cells[0], cells[2], "--out", b)
	require.NoError(t, err, out)
	for _, f := range []string{"summary.json", "summary.md", "index.html"} {
		assert.Equal(t, string(readBytes(t, filepath.Join(a, f))), string(readBytes(t, filepath.Join(b, f))), f)
	}
	var merged struct {
		SchemaVersion int      `json:"schema_version"`
		CellOrder     []string `json:"cell_order"`
		Missing       []int    `json:"missing"`
		Cells         map[string]struct {
			Index   int `json:"index"`
			Summary struct {
				Seed    uint64                     `json:"seed"`
				Pickers map[string]json.RawMessage `json:"pickers"`
				Cell    any                        `json:"cell"`
			} `json:"summary"`
		} `json:"cells"`
	}
	require.NoError(t, json.Unmarshal(readBytes(t, filepath.Join(a, "summary.json")), &merged))
	assert.Equal(t, []string{"seed=1,workers=2", "seed=1,workers=3", "seed=2,workers=2", "seed=2,workers=3"}, merged.CellOrder)
	assert.Equal(t, []int{}, merged.Missing)
	assert.Equal(t, uint64(2), merged.Cells["seed=2,workers=3"].Summary.Seed)
	assert.Equal(t, 3, merged.Cells["seed=2,workers=3"].Index)
	assert.Len(t, merged.Cells["seed=1,workers=2"].Summary.Pickers, 2)
	assert.Nil(t, merged.Cells["seed=1,workers=2"].Summary.Cell)
	html := string(readBytes(t, filepath.Join(a, "index.html")))
	assert.Contains(t, html, "TTFT p90 (ms) by workers")
	assert.Contains(t, html, "hit ratio by seed")
	assert.Equal(t, 4, strings.Count(html, "<svg"), "two figures against two dimensions")

	require.NoError(t, os.RemoveAll(cells[2]))
	out, err = run(t, "reports", "merge", res, "--out", filepath.Join(t.TempDir(), "c"))
	requireExit1(t, err)
	assert.Contains(t, out, "missing cells: 2")
	assert.Contains(t, err.Error(), "1 of 4 cells are missing (2)")
	c := filepath.Join(t.TempDir(), "c")
	out, err = run(t, "reports", "merge", res, "--out", c, "--allow-missing")
	require.NoError(t, err, out)
	require.NoError(t, json.Unmarshal(readBytes(t, filepath.Join(c, "summary.json")), &merged))
	assert.Equal(t, []int{2}, merged.Missing)
	assert.Contains(t, string(readBytes(t, filepath.Join(c, "summary.md"))), "Missing cells: 2.")
}

// Cells of another sweep, plain runs, other schema versions and two
// files claiming one cell are refused, the file named.
func TestSweepMergeRefusesWhatIsNotOneSweep(t *testing.T) {
	trace := miniTrace(t, 12)
	res := t.TempDir()
	c0 := runCell(t, sweepArgs(trace), res, 0)
	other := append(sweepArgs(trace), "--limit", "10")
	c1 := runCell(t, other, t.TempDir(), 1)
	_, err := run(t, "reports", "merge", c0, c1, "--out", t.TempDir())
	requireExit1(t, err)
	assert.Contains(t, err.Error(), filepath.Join(c1, "summary.json"))
	assert.Contains(t, err.Error(), "merge the cells of one sweep at a time")

	dup := filepath.Join(t.TempDir(), "copy")
	require.NoError(t, os.MkdirAll(dup, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dup, "summary.json"), readBytes(t, filepath.Join(c0, "summary.json")), 0o644))
	_, err = run(t, "reports", "merge", c0, dup, "--out", t.TempDir())
	requireExit1(t, err)
	assert.Contains(t, err.Error(), "are both cell 0")

	plain := filepath.Join(t.TempDir(), "plain")
	out, err := run(t, "bench", "pickers", "--trace", trace, "--workers", "2", "--pickers", "load", "--out", plain)
	require.NoError(t, err, out)
	_, err = run(t, "reports", "merge", plain, "--out", t.TempDir())
	requireExit1(t, err)
	assert.Contains(t, err.Error(), filepath.Join(plain, "summary.json")+`: no "cell"`)

	raw := strings.Replace(string(readBytes(t, filepath.Join(c0, "summary.json"))), `"schema_version": 1`, `"schema_version": 9`, 1)
	require.NoError(t, os.WriteFile(filepath.Join(dup, "summary.json"), []byte(raw), 0o644))
	_, err = run(t, "reports", "merge", dup, "--out", t.TempDir())
	requireExit1(t, err)
	assert.Contains(t, err.Error(), "schema_version 9, this version reads 1")

	_, err = run(t, "reports", "merge", t.TempDir(), "--out", t.TempDir())
	requireExit1(t, err)
	assert.Contains(t, err.Error(), "neither a cell")
}

func TestSweepRefusesBadSpecifications(t *testing.T) {
	trace := miniTrace(t, 5)
	base := []string{"bench", "pickers", "--trace", trace, "--workers", "2"}
	out := filepath.Join(t.TempDir(), "out")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sweep", "seed", "--cell", "0", "--out", out}, "want NAME=V1,V2"},
		{[]string{"--sweep", "pickers=load,kv", "--cell", "0", "--out", out}, "pickers cannot be swept by bench pickers (sweepable: fleet, limit"},
		{[]string{"--sweep", "speedup=2,fast", "--cell", "0", "--out", out}, `--sweep speedup: fast is not a value of --speedup`},
		{[]string{"--sweep", "seed=1,1", "--cell", "0", "--out", out}, `the value "1" is given twice`},
		{[]string{"--sweep", "seed=1", "--sweep", "seeds=2", "--cell", "0", "--out", out}, "--sweep seed is given twice"},
		{[]string{"--sweep", "workers=2,3", "--cell", "0", "--out", out}, "--workers is also given"},
		{[]string{"--sweep", "seed=1,2"}, "--sweep needs --emit-job DIR"},
		{[]string{"--sweep", "seed=1,2", "--cell", "2", "--out", out}, "--cell 2: the grid has cells 0..1"},
		{[]string{"--sweep", "seed=1,2", "--cell", "-1", "--out", out}, "numbered from 0"},
		{[]string{"--sweep", "seed=1,2", "--cell", "0"}, "--cell needs --out"},
		{[]string{"--sweep", "seed=1,2", "--cell", "0", "--emit-job", out}, "not both"},
		{[]string{"--sweep", "seed=1,2", "--cell", "0", "--out", out, "--image", "x"}, "--image applies to --emit-job only"},
		{[]string{"--sweep", "seed=1,2", "--emit-job", out}, "--image is required with --emit-job"},
		{[]string{"--sweep", "seed=1,2", "--emit-job", out, "--image", "x", "--job-parallelism", "3"}, "--job-parallelism 3: want 1..2"},
	} {
		_, err := run(t, append(append([]string(nil), base...), c.args...)...)
		requireExit1(t, err)
		assert.Contains(t, err.Error(), c.want, strings.Join(c.args, " "))
	}
	_, err := os.Stat(out)
	assert.True(t, os.IsNotExist(err), "a refused sweep writes nothing")
}

// A tune sweep's merge recommends what the search's own grid stage
// finds: each grid point's figure is the local search's for the same
// settings, and the best point is the grid stage's best.
func TestTuneSweepRecommendsTheSearchsGridBest(t *testing.T) {
	sc := tuneScenarioFile(t, 120)
	emit := t.TempDir()
	out, err := run(t, "tune", "--scenario", sc, "--emit-job", emit, "--image", "switchyard:test")
	require.NoError(t, err, out)
	assert.Contains(t, out, "15 cells")
	res := t.TempDir()
	args := []string{"tune", "--scenario", sc}
	for i := range 15 {
		runCell(t, args, res, i)
	}
	merged := filepath.Join(t.TempDir(), "merged")
	out, err = run(t, "reports", "merge", res, "--out", merged)
	require.NoError(t, err, out)
	local := filepath.Join(t.TempDir(), "local")
	out, err = run(t, "tune", "--scenario", sc, "--budget", "19", "--out", local)
	require.NoError(t, err, out)

	s, _ := readTune(t, local)
	var m struct {
		Tuned struct {
			Current      string  `json:"current"`
			Tuned        string  `json:"tuned"`
			CurrentValue float64 `json:"current_value"`
			TunedValue   float64 `json:"tuned_value"`
		} `json:"tuned"`
		Cells map[string]struct {
			Summary struct {
				Pickers map[string]struct {
					TTFT struct {
						P90 float64 `json:"p90"`
					} `json:"ttft_ms"`
				} `json:"pickers"`
			} `json:"summary"`
		} `json:"cells"`
	}
	require.NoError(t, json.Unmarshal(readBytes(t, filepath.Join(merged, "summary.json")), &m))
	bestGrid, bestValue := "", 0.0
	for i, e := range s.Evaluations {
		if e.Phase == "refine" {
			continue
		}
		key := fmtKnob(e.Settings["prefill_load_scale"].(float64)) + "/" + fmtKnob(e.Settings["overlap_score_credit"].(float64))
		if i == 0 {
			key = "current"
		}
		cell, ok := m.Cells["prefill_load_scale/overlap_score_credit="+key]
		require.True(t, ok, key)
		assert.InDelta(t, e.Value, cell.Summary.Pickers["kv"].TTFT.P90, 1e-6, key)
		if bestGrid == "" || e.Value < bestValue {
			bestGrid, bestValue = key, e.Value
		}
	}
	assert.Equal(t, bestGrid, m.Tuned.Tuned)
	assert.InDelta(t, bestValue, m.Tuned.TunedValue, 1e-6)
	tuned := string(readBytes(t, filepath.Join(merged, "tuned.yaml")))
	assert.Contains(t, tuned, "prefill_load_scale: "+strings.Split(bestGrid, "/")[0]+" ")
	assert.Contains(t, string(readBytes(t, filepath.Join(merged, "index.html"))), "by prefill_load_scale")
}

// jobArgs is the emitted Job's container arguments.
func jobArgs(t *testing.T, path string) []string {
	t.Helper()
	u := &unstructured.Unstructured{}
	body := readBytes(t, path)
	js, err := yaml.YAMLToJSON(body)
	require.NoError(t, err)
	require.NoError(t, u.UnmarshalJSON(js))
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	require.Len(t, cs, 1)
	raw, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	return raw
}

// The Job's own command line, with its index and volume filled in as
// Kubernetes fills them, writes the cell --cell writes.
func TestSweepJobCommandIsTheLocalCell(t *testing.T) {
	trace := miniTrace(t, 12)
	emit := t.TempDir()
	out, err := run(t, append(sweepArgs(trace), "--emit-job", emit, "--image", "switchyard:test", "--parallel", "1")...)
	require.NoError(t, err, out)
	results := t.TempDir()
	var args []string
	for _, a := range jobArgs(t, filepath.Join(emit, "job.yaml")) {
		a = strings.ReplaceAll(a, "$(JOB_COMPLETION_INDEX)", "2")
		args = append(args, strings.Replace(a, "/results/", results+"/", 1))
	}
	out, err = run(t, args...)
	require.NoError(t, err, out)
	local := runCell(t, sweepArgs(trace), t.TempDir(), 2)
	for _, f := range []string{"summary.json", "summary.md", "index.html"} {
		assert.Equal(t, string(readBytes(t, filepath.Join(local, f))), string(readBytes(t, filepath.Join(results, "cell-2", f))), f)
	}
}
