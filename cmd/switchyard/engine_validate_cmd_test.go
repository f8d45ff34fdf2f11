package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// validateExperiment is a small synthetic inference-perf experiment with a
// BLIS baseline; the id and simulatable flag are filled in.
const validateExperiment = `{
 "schema": "switchyard-groundtruth/v1", "id": "%s",
 "status": {"simulatable": %t, "overloaded": false},
 "model": {"vocab_size": 1000},
 "hardware": {"gpu": "g", "num_gpus": 1},
 "engine": {"tp": 1, "dp": 1, "max_num_batched_tokens": 2048, "max_num_seqs": 16,
            "gpu_memory_utilization": 0.9, "block_size": 16, "num_gpu_blocks": 500},
 "workload": {"kind": "inference_perf_shared_prefix", "simulatable": true, "recipe_status": "synthetic",
   "shared_prefix": {"num_groups": 2, "prompts_per_group": 2, "system_prompt_len": 32, "question_len": 16, "output_len": 5},
   "stages": [{"index": 0, "rate_rps": 2, "duration_s": 5, "num_requests": 10}]},
 "measured": {"stages": [{"index": 0, "ttft_ms": {"mean": 20, "p90": 25}, "e2e_ms": {"mean": 60, "p90": 70}, "tpot_true_ms": 10}]},
 "baselines": {"blis_trained_physics": {"stages": [{"index": 0, "ttft_ms": {"mean": 22}, "e2e_ms": {"mean": 66}, "itl_ms_mean": 11}]}}
}`

func writeValidateExperiment(t *testing.T, root, id string, simulatable bool) {
	t.Helper()
	dir := filepath.Join(root, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := strings.Replace(strings.Replace(validateExperiment, "%s", id, 1), "%t", map[bool]string{true: "true", false: "false"}[simulatable], 1)
	if err := os.WriteFile(filepath.Join(dir, "experiment.json"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestEngineValidate(t *testing.T) {
	root := t.TempDir()
	writeValidateExperiment(t, root, "x-sim", true)
	writeValidateExperiment(t, root, "y-partial", false)
	if err := os.MkdirAll(filepath.Join(root, "z-broken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "z-broken", "experiment.json"), []byte(`{"schema": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "pred.json")
	var stdout, stderr bytes.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	// The fixture names no architecture, so only the mocker can run it.
	cmd.SetArgs([]string{"engine", "validate", root, "--profile", "mocker", "--json", out, "--seeds", "3", "--seed", "7"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("validate: %v\n%s", err, stderr.String())
	}
	text := stdout.String()
	for _, want := range []string{
		"| x-sim | switchyard |", "| | blis_trained_physics | 10.0 | – | 10.0 | – | 10.0 |",
		"| blis_trained_physics | 1 | 10.0 (+10.0) |", "Spread over seeds 7..9",
		"- y-partial: not simulatable: status.simulatable is false (recipe: synthetic)",
		"- z-broken: ", "schema",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	var pred struct {
		Simulator   string `json:"simulator"`
		Experiments map[string]struct {
			Stages []struct {
				Index     int `json:"index"`
				Completed int `json:"completed"`
				TTFT      struct {
					Mean, P50, P90, P99 float64
				} `json:"ttft_ms"`
				TPOT float64 `json:"tpot_ms"`
			} `json:"stages"`
			Summary struct {
				Completed int `json:"completed"`
			} `json:"summary"`
		} `json:"experiments"`
		NotSimulated map[string]string `json:"not_simulated"`
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &pred); err != nil {
		t.Fatal(err)
	}
	x, ok := pred.Experiments["x-sim"]
	if !strings.HasPrefix(pred.Simulator, "switchyard@") || !strings.Contains(pred.Simulator, "--seed 7") || !ok ||
		len(x.Stages) != 1 || x.Stages[0].Completed != 10 || x.Summary.Completed != 10 || x.Stages[0].TTFT.P99 <= 0 || x.Stages[0].TPOT <= 0 {
		t.Fatalf("predictions %s", data)
	}
	if len(pred.NotSimulated) != 2 {
		t.Fatalf("not simulated %v, want y-partial and z-broken", pred.NotSimulated)
	}
	if !strings.Contains(stderr.String(), "simulating experiments") {
		t.Errorf("no progress on stderr: %q", stderr.String())
	}
}

func TestEngineValidateRefusesBadArguments(t *testing.T) {
	root := t.TempDir()
	writeValidateExperiment(t, root, "x", true)
	for _, args := range [][]string{
		{"engine", "validate", root, "--profile", "nonesuch"},
		{"engine", "validate", root, "--seeds", "0"},
		{"engine", "validate", filepath.Join(root, "missing")},
		{"engine", "validate"},
	} {
		cmd := newRootCmd()
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(args)
		if err := cmd.Execute(); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
