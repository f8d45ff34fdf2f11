package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"switchyard/fakefleet/engine/perf"
	"switchyard/fakefleet/engine/validate"
	"switchyard/internal/groundtruth"
)

// tinyModel and testH100 describe a small dense model on an H100-like GPU,
// shaped like the experiments' model and hardware objects: a step costs
// about 0.1 ms of weight reads plus the profile's overheads.
func tinyModel() map[string]any {
	return map[string]any{"hf_name": "tiny/model", "architecture": "LlamaForCausalLM", "num_layers": 4, "hidden_size": 512,
		"intermediate_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 1000,
		"tie_word_embeddings": false, "moe": nil, "params_total": 1e8, "params_active_per_token": 1e8,
		"weight_bytes_per_param": 2, "kv_cache_bytes_per_token": 8192}
}

func testH100() map[string]any {
	return map[string]any{"gpu": "test H100", "hardware_key": "H100", "num_gpus": 1, "memory_gb": 80, "hbm_bandwidth_tbps": 3.35,
		"peak_bf16_tflops_dense": 989.4, "peak_fp8_tflops_dense": 1978.9, "interconnect": "NVLink 4"}
}

// writeDeploymentExperiment writes a synthetic inference-perf experiment on
// the tiny model: sparse arrivals, 5 output tokens, measured as 30 ms
// steps and a 20 ms client overhead would give (TTFT at the second token,
// 80 ms; E2E 170 ms; TPOT (170 − 80)/4 = 22.5 ms), at tensor parallelism tp.
func writeDeploymentExperiment(t *testing.T, root, id string, tp int) {
	t.Helper()
	hw := testH100()
	hw["num_gpus"] = tp
	exp := map[string]any{
		"schema": "switchyard-groundtruth/v1", "id": id,
		"status": map[string]any{"simulatable": true, "overloaded": false},
		"model":  tinyModel(), "hardware": hw,
		"engine": map[string]any{"tp": tp, "dp": 1, "max_num_batched_tokens": 2048, "max_num_seqs": 16,
			"gpu_memory_utilization": 0.9, "block_size": 16, "enable_prefix_caching": true, "enable_chunked_prefill": true},
		"workload": map[string]any{"kind": "inference_perf_shared_prefix", "simulatable": true, "recipe_status": "synthetic",
			"shared_prefix": map[string]any{"num_groups": 2, "prompts_per_group": 2, "system_prompt_len": 32, "question_len": 16, "output_len": 5},
			"stages":        []any{map[string]any{"index": 0, "rate_rps": 1, "duration_s": 12, "num_requests": 12}}},
		"measured": map[string]any{"stages": []any{map[string]any{"index": 0, "ttft_ms": map[string]any{"mean": 80, "p90": 85},
			"e2e_ms": map[string]any{"mean": 170, "p90": 180}, "tpot_true_ms": 22.5}}},
		"baselines": map[string]any{"blis_trained_physics": map[string]any{"stages": []any{map[string]any{"index": 0,
			"ttft_ms": map[string]any{"mean": 88}, "e2e_ms": map[string]any{"mean": 187}, "itl_ms_mean": 24.75}}}},
	}
	data, err := json.Marshal(exp)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "experiment.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeTinyProfile writes a profile of the tiny model whose steps cost
// stepUs of overhead and whose client overhead is requestMs.
func writeTinyProfile(t *testing.T, path string, stepUs, requestMs float64) {
	t.Helper()
	var p perf.Profile
	raw, _ := json.Marshal(map[string]any{"name": "tiny", "model": tinyModel(), "hardware": testH100(), "tp": 1, "dp": 1,
		"coefficients": map[string]any{"matmul_efficiency": 0.5, "attention_efficiency": 0.5, "bandwidth_efficiency": 0.8,
			"step_overhead_us": stepUs, "seq_overhead_us": 0, "allreduce_us": 0},
		"engine": map[string]any{}, "overheads": map[string]any{"request_ms": requestMs}})
	p, err := perf.ParseProfile(raw)
	if err != nil {
		t.Fatal(err)
	}
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func runSwitchyard(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v: %v\n%s\n%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

type predictionsFile struct {
	Simulator   string                         `json:"simulator"`
	Experiments map[string]validate.Prediction `json:"experiments"`
}

func readPredictions(t *testing.T, path string) predictionsFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p predictionsFile
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEngineValidateProfileFile: the file's coefficients price the steps
// (a 20 ms step overhead gives 20 ms steps, a 40 ms one 40 ms) and its
// client overhead is added to TTFT. With TTFT taken at the second of 5
// tokens, TPOT = (E2E − TTFT)/4 spans 3 steps: a step is TPOT × 4/3.
func TestEngineValidateProfileFile(t *testing.T) {
	root := t.TempDir()
	writeDeploymentExperiment(t, root, "x-tiny", 1)
	for _, c := range []struct {
		stepUs, requestMs, wantTPOT float64
	}{{20000, 7, 20}, {40000, 3, 40}} {
		prof := filepath.Join(t.TempDir(), "p.json")
		writeTinyProfile(t, prof, c.stepUs, c.requestMs)
		out := filepath.Join(t.TempDir(), "pred.json")
		runSwitchyard(t, "engine", "validate", filepath.Join(root, "x-tiny"), "--profile", prof, "--json", out)
		s := readPredictions(t, out).Experiments["x-tiny"].Summary
		if step := s.TPOTMs * 4 / 3; step < c.wantTPOT || step > c.wantTPOT*1.05 {
			t.Errorf("step overhead %v µs: steps of %.2f ms, want about %v", c.stepUs, step, c.wantTPOT)
		}
		// TTFT: the client overhead, then the prefill step and one decode
		// step (inference-perf's first chunk carries two tokens).
		if min := c.requestMs + 2*c.wantTPOT; s.TTFT.Mean < min || s.TTFT.Mean > min*1.1 {
			t.Errorf("request_ms %v: TTFT %.2f ms, want about %v", c.requestMs, s.TTFT.Mean, min)
		}
	}
	// roofline: the generic coefficients, 0.5 ms steps.
	out := filepath.Join(t.TempDir(), "pred.json")
	runSwitchyard(t, "engine", "validate", root, "--profile", "roofline", "--json", out)
	if step := readPredictions(t, out).Experiments["x-tiny"].Summary.TPOTMs * 4 / 3; step < 0.5 || step > 1 {
		t.Errorf("roofline steps of %.3f ms, want the generic 0.5 ms step plus weight reads", step)
	}
}

// TestEngineValidateDefaultsToTheCalibratedProfile: without --profile the
// shipped calibrated coefficients price the experiment, exactly as the
// profile file does.
func TestEngineValidateDefaultsToTheCalibratedProfile(t *testing.T) {
	root := t.TempDir()
	writeDeploymentExperiment(t, root, "x-tiny", 1)
	def := filepath.Join(t.TempDir(), "default.json")
	stdout, _ := runSwitchyard(t, "engine", "validate", root, "--json", def)
	if !strings.Contains(stdout, "(profile calibrated, seed 1)") {
		t.Errorf("the default run does not say it used the calibrated profile:\n%s", stdout)
	}
	file := filepath.Join(t.TempDir(), "file.json")
	runSwitchyard(t, "engine", "validate", root, "--profile", "../../profiles/calibrated.json", "--json", file)
	got, want := readPredictions(t, def).Experiments["x-tiny"], readPredictions(t, file).Experiments["x-tiny"]
	if got.Summary.TPOTMs <= 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("default predictions %+v, want the calibrated file's %+v", got.Summary, want.Summary)
	}
}

// TestEngineFitReducesTheLoss fits two synthetic experiments (30 ms steps
// and 20 ms of client overhead measured) from the generic coefficients (0.5 ms steps): the
// loss must fall far below the start's, the step overhead approach the
// measured per-token time, the fit record say what was done, and a second
// run give the same file.
func TestEngineFitReducesTheLoss(t *testing.T) {
	root := t.TempDir()
	writeDeploymentExperiment(t, root, "x-one", 1)
	writeDeploymentExperiment(t, root, "x-two", 1)
	args := []string{"engine", "fit", root, "--max-evals", "200", "--scale", "1", "--params", "step_overhead_us,request_ms",
		"--date", "2000-01-02", "--parallel", "2"}
	outA, outB := filepath.Join(t.TempDir(), "a.json"), filepath.Join(t.TempDir(), "b.json")
	stdout, stderr := runSwitchyard(t, append(args, "--out", outA)...)
	runSwitchyard(t, append(args, "--out", outB)...)

	p, err := perf.LoadProfile(outA)
	if err != nil {
		t.Fatal(err)
	}
	exps := loadAll(t, root)
	cal, _ := validate.NewCalibration(exps, defaultBaseProfile(), 1)
	start := defaultBaseProfile()
	startLoss, err := cal.Loss(start)
	if err != nil {
		t.Fatal(err)
	}
	if p.Fit == nil || p.Fit.Objective > startLoss/4 || p.Fit.Objective > 15 {
		t.Fatalf("fit %+v from a start loss of %.1f: the loss did not fall", p.Fit, startLoss)
	}
	if s := p.Coefficients.StepOverheadUs; s < 25000 || s > 35000 {
		t.Errorf("step overhead %.0f µs, want near the measured 30 ms per token", s)
	}
	if r := p.Overheads.RequestMs; r < 10 || r > 30 {
		t.Errorf("client overhead %.1f ms, want near the measured 20 ms", r)
	}
	f := p.Fit
	if strings.Join(f.Experiments, ",") != "x-one,x-two" || f.Date != "2000-01-02" || f.Scale != 1 || f.Seed != 1 ||
		f.Evaluations < 2 || f.FullScaleObjective <= 0 || !strings.Contains(f.Loss, "|MPE|") {
		t.Errorf("fit record %+v", f)
	}
	if p.Coefficients.MatmulEfficiency != perf.DefaultCoefficients.MatmulEfficiency {
		t.Error("a coefficient outside --params changed")
	}
	if !strings.Contains(stdout, "| x-one |") || !strings.Contains(stderr, "fitting") {
		t.Errorf("output:\n%s\nstderr:\n%s", stdout, stderr)
	}
	a, _ := os.ReadFile(outA)
	b, _ := os.ReadFile(outB)
	if !bytes.Equal(a, b) {
		t.Errorf("two fits with the same seed differ:\n%s\n%s", a, b)
	}
}

// TestEngineFitRestarts: a fit with --restarts records the restarts it ran
// and ends no worse than the same fit without them.
func TestEngineFitRestarts(t *testing.T) {
	root := t.TempDir()
	writeDeploymentExperiment(t, root, "x-one", 1)
	args := []string{"engine", "fit", root, "--max-evals", "8", "--scale", "1", "--params", "step_overhead_us,request_ms",
		"--date", "2000-01-02", "--parallel", "1"}
	plainOut, restartOut := filepath.Join(t.TempDir(), "a.json"), filepath.Join(t.TempDir(), "b.json")
	runSwitchyard(t, append(args, "--out", plainOut)...)
	stdout, _ := runSwitchyard(t, append(args, "--out", restartOut, "--restarts", "2")...)
	plain, err := perf.LoadProfile(plainOut)
	if err != nil {
		t.Fatal(err)
	}
	restarted, err := perf.LoadProfile(restartOut)
	if err != nil {
		t.Fatal(err)
	}
	if restarted.Fit.Restarts < 1 || restarted.Fit.Objective > plain.Fit.Objective || !strings.Contains(restarted.Fit.Method, "restarts") {
		t.Errorf("with --restarts 2: %+v; without: %+v", restarted.Fit, plain.Fit)
	}
	if !strings.Contains(stdout, fmt.Sprintf("%d restarts", restarted.Fit.Restarts)) {
		t.Errorf("output does not say how many restarts ran:\n%s", stdout)
	}
}

// TestEngineFitNamesTheSamplingTime: the sampler's time per logit is off in
// the generic profile, fitted when --params names it, and printed.
func TestEngineFitNamesTheSamplingTime(t *testing.T) {
	root := t.TempDir()
	writeDeploymentExperiment(t, root, "x-one", 1)
	out := filepath.Join(t.TempDir(), "a.json")
	stdout, _ := runSwitchyard(t, "engine", "fit", root, "--max-evals", "12", "--scale", "1", "--params", "sampling_ns_per_logit,request_ms",
		"--date", "2000-01-02", "--parallel", "1", "--out", out)
	p, err := perf.LoadProfile(out)
	if err != nil {
		t.Fatal(err)
	}
	if perf.DefaultCoefficients.SamplingNsPerLogit != 0 {
		t.Fatal("the generic profile prices sampling")
	}
	// The synthetic steps take 30 ms against the generic 0.5 ms: the fit
	// raises the only step-time parameter it was given.
	if p.Coefficients.SamplingNsPerLogit <= perf.GenericSamplingNsPerLogit {
		t.Errorf("sampling_ns_per_logit = %v, want above the generic start %v", p.Coefficients.SamplingNsPerLogit, perf.GenericSamplingNsPerLogit)
	}
	if !strings.Contains(stdout, "| sampling_ns_per_logit |") {
		t.Errorf("output lacks the sampling column:\n%s", stdout)
	}
}

func loadAll(t *testing.T, root string) []*groundtruth.Experiment {
	t.Helper()
	dirs, err := groundtruth.Expand([]string{root})
	if err != nil {
		t.Fatal(err)
	}
	var exps []*groundtruth.Experiment
	for _, d := range dirs {
		exp, err := groundtruth.Load(d)
		if err != nil {
			t.Fatal(err)
		}
		exps = append(exps, exp)
	}
	return exps
}

// TestEngineFitLODO: two deployments (TP 1 and TP 2); each is predicted by
// a fit on the other, beside BLIS and the mocker.
func TestEngineFitLODO(t *testing.T) {
	root := t.TempDir()
	writeDeploymentExperiment(t, root, "x-tp1", 1)
	writeDeploymentExperiment(t, root, "x-tp2", 2)
	stdout, _ := runSwitchyard(t, "engine", "fit", root, "--lodo", "--max-evals", "20", "--scale", "1",
		"--params", "step_overhead_us,request_ms", "--date", "2000-01-02")
	for _, want := range []string{"| x-tp1 | switchyard |", "| x-tp2 | switchyard |", "| | blis_trained_physics | 10.0 | – | 10.0 | – | 10.0 |",
		"| | mocker |", "| switchyard (LODO) | 2 (all simulated) |", "| blis_trained_physics | 2 | 10.0 (+10.0) |",
		"| tiny/model on 2× H100 (tp 2, dp 1) |", " pcie_hop_us | sampling_ns_per_logit | request_ms | loss | evaluations |"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	// Every row of the folds' table has as many cells as its header.
	table, _, _ := strings.Cut(stdout[strings.Index(stdout, "| deployment left out |"):], "\n\n")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 4 {
		t.Fatalf("folds' table: %d lines, want a header, a rule and one row per fold:\n%s", len(lines), table)
	}
	for _, l := range lines[1:] {
		if strings.Count(l, "|") != strings.Count(lines[0], "|") {
			t.Errorf("row %q has not the header's cells", l)
		}
	}
}

func TestEngineFitRefusesBadArguments(t *testing.T) {
	root := t.TempDir()
	writeDeploymentExperiment(t, root, "x", 1)
	out := filepath.Join(t.TempDir(), "p.json")
	for _, args := range [][]string{
		{"engine", "fit", root},
		{"engine", "fit", root, "--out", out, "--scale", "0"},
		{"engine", "fit", root, "--out", out, "--scale", "1.5"},
		{"engine", "fit", root, "--out", out, "--params", "nonesuch"},
		{"engine", "fit", root, "--out", out, "--max-evals", "0"},
		{"engine", "fit", root, "--out", out, "--restarts", "-1"},
		{"engine", "fit", root, "--out", out, "--date", "yesterday"},
		{"engine", "fit", root, "--out", out, "--exclude", "x"},
		{"engine", "fit", root, "--lodo"},
		{"engine", "fit", root, "--out", out, "--base", filepath.Join(root, "missing.json")},
	} {
		cmd := newRootCmd()
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(args)
		if err := cmd.Execute(); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused fit wrote a profile")
	}
}
