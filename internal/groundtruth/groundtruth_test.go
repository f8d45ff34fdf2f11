package groundtruth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sharedPrefixJSON is a small synthetic experiment of the inference-perf
// kind; replace edits it for the error cases.
const sharedPrefixJSON = `{
 "schema": "switchyard-groundtruth/v1", "id": "t-shared", "split": "calibration",
 "status": {"simulatable": true, "overloaded": "partly", "per_request_data": false},
 "model": {"hf_name": "m", "num_layers": 2, "vocab_size": 1000, "params_total": 1e9,
           "weight_bytes_per_param": 2, "kv_cache_bytes_per_token": 4096,
           "moe": {"num_experts": 8, "experts_per_token": 2, "moe_layers": "all"}},
 "hardware": {"gpu": "g", "num_gpus": 1, "memory_gb": 80, "hbm_bandwidth_tbps": 3.35},
 "engine": {"tp": 1, "dp": 1, "max_num_batched_tokens": 2048, "max_num_seqs": 128, "max_model_len": 4096,
            "gpu_memory_utilization": 0.9, "block_size": 16, "enable_prefix_caching": true, "num_gpu_blocks": null},
 "workload": {"kind": "inference_perf_shared_prefix", "simulatable": true,
   "shared_prefix": {"num_groups": 2, "prompts_per_group": 3, "system_prompt_len": 32, "question_len": 20, "output_len": 8},
   "stages": [{"index": 0, "rate_rps": 2, "duration_s": 5, "num_requests": 10}]},
 "measured": {"stages": [{"index": 0, "ttft_ms": {"mean": 20, "p90": 25}, "e2e_ms": {"mean": 90, "p90": 100}, "tpot_true_ms": 10}],
              "summary": {"ttft_ms": {"mean": 20, "p90": 25}, "e2e_ms": {"mean": 90, "p90": 100}, "tpot_true_ms": 10}},
 "baselines": {"blis_trained_physics": {"simulator": "b", "stages": [{"index": 0, "ttft_ms": {"mean": 22}, "e2e_ms": {"mean": 95}, "itl_ms_mean": 11}]}},
 "notes": ["synthetic"],
 "field_this_package_does_not_know": {"is": "ignored"}
}`

func TestParseExperiment(t *testing.T) {
	exp, err := ParseExperiment([]byte(sharedPrefixJSON))
	if err != nil {
		t.Fatal(err)
	}
	if exp.ID != "t-shared" || exp.Workload.Kind != SharedPrefix || exp.Workload.SharedPrefix.Prompts() != 6 {
		t.Fatalf("decoded %+v", exp)
	}
	if !exp.Status.IsOverloaded() || exp.Engine.NumGPUBlocks != nil || *exp.Engine.MaxModelLen != 4096 {
		t.Fatalf("status or engine: %+v %+v", exp.Status, exp.Engine)
	}
	if got := *exp.Baselines["blis_trained_physics"].Stages[0].ITLMeanMs; got != 11 {
		t.Fatalf("baseline itl %v", got)
	}
	if got := *exp.Measured.Summary.TPOTTrueMs; got != 10 {
		t.Fatalf("summary tpot %v", got)
	}
}

func TestParseExperimentNamesTheField(t *testing.T) {
	cases := []struct{ old, new, field string }{
		{`"switchyard-groundtruth/v1"`, `"v0"`, "schema"},
		{`"id": "t-shared"`, `"id": "../x"`, "id"},
		{`"tp": 1`, `"tp": 0`, "engine.tp"},
		{`"tp": 1`, `"tp": "one"`, "engine.tp"},
		{`"block_size": 16`, `"block_size": 100000`, "engine.block_size"},
		{`"gpu_memory_utilization": 0.9`, `"gpu_memory_utilization": 1.5`, "engine.gpu_memory_utilization"},
		{`"rate_rps": 2`, `"rate_rps": -2`, "workload.stages[0].rate_rps"},
		{`"num_requests": 10`, `"num_requests": 100000000`, "workload.stages[0].num_requests"},
		{`"num_groups": 2`, `"num_groups": 70000`, "workload.shared_prefix.num_groups"},
		{`"output_len": 8`, `"output_len": 0`, "workload.shared_prefix.output_len"},
		{`"kind": "inference_perf_shared_prefix"`, `"kind": "other"`, "workload.kind"},
		{`"tpot_true_ms": 10}],`, `"tpot_true_ms": -1}],`, "measured.stages[0].tpot_true_ms"},
		{`"itl_ms_mean": 11`, `"itl_ms_mean": -11`, "baselines.blis_trained_physics.stages[0].itl_ms_mean"},
		{`"memory_gb": 80`, `"memory_gb": -80`, "hardware.memory_gb"},
	}
	for _, c := range cases {
		if !strings.Contains(sharedPrefixJSON, c.old) {
			t.Fatalf("test case %q does not edit the fixture", c.old)
		}
		_, err := ParseExperiment([]byte(strings.Replace(sharedPrefixJSON, c.old, c.new, 1)))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s -> %s: error %v, want one naming %s", c.old, c.new, err, c.field)
		}
	}
	for _, bad := range []string{"", "{", "[]", sharedPrefixJSON + "{}"} {
		if _, err := ParseExperiment([]byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%.20q: error %v, want ErrInvalid", bad, err)
		}
	}
}

func TestPartialRecipeNeedsNoStages(t *testing.T) {
	partial := strings.Replace(sharedPrefixJSON, `"kind": "inference_perf_shared_prefix", "simulatable": true`,
		`"kind": "inference_perf_shared_prefix", "simulatable": false`, 1)
	partial = strings.Replace(partial, `"rate_rps": 2`, `"rate_rps": 0`, 1)
	if _, err := ParseExperiment([]byte(partial)); err != nil {
		t.Fatalf("a partial recipe is loaded (and reported as not simulatable later): %v", err)
	}
}

const traceLines = `{"id":"r0","arrival_s":0.5,"input_tokens":40,"output_tokens":3,"prefix_block_ids":[1,2],"measured":{"ttft_ms":10,"e2e_ms":30}}

{"id":"r1","arrival_s":0.1,"input_tokens":20,"output_tokens":1,"shared_prefix_group":0,"shared_prefix_tokens":16,"measured":null}
`

func TestParseRequests(t *testing.T) {
	reqs, err := ParseRequests(strings.NewReader(traceLines), 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0].PrefixBlockIDs[1] != 2 || reqs[1].Measured != nil || *reqs[1].SharedPrefixGroup != 0 {
		t.Fatalf("decoded %+v", reqs)
	}
	if *reqs[0].Measured.E2EMs != 30 {
		t.Fatalf("measured %+v", reqs[0].Measured)
	}
}

func TestParseRequestsRefuses(t *testing.T) {
	ok := `{"id":"a","arrival_s":0,"input_tokens":32,"output_tokens":2}`
	cases := map[string]string{
		"duplicate id":      ok + "\n" + ok,
		"too many blocks":   `{"id":"a","arrival_s":0,"input_tokens":31,"output_tokens":2,"prefix_block_ids":[1,2]}`,
		"no input":          `{"id":"a","arrival_s":0,"input_tokens":0,"output_tokens":2}`,
		"no output":         `{"id":"a","arrival_s":0,"input_tokens":4,"output_tokens":0}`,
		"negative arrival":  `{"id":"a","arrival_s":-1,"input_tokens":4,"output_tokens":1}`,
		"empty id":          `{"id":"","arrival_s":0,"input_tokens":4,"output_tokens":1}`,
		"prefix too long":   `{"id":"a","arrival_s":0,"input_tokens":4,"output_tokens":1,"shared_prefix_tokens":5}`,
		"negative measured": `{"id":"a","arrival_s":0,"input_tokens":4,"output_tokens":1,"measured":{"ttft_ms":-1}}`,
		"not json":          `{"id":`,
		"wrong type":        `{"id":"a","arrival_s":"soon","input_tokens":4,"output_tokens":1}`,
		"empty":             "\n\n",
		"huge line":         `{"id":"` + strings.Repeat("x", maxRequestLine) + `"}`,
	}
	for name, in := range cases {
		if _, err := ParseRequests(strings.NewReader(in), 16); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", name, err)
		}
	}
	if _, err := ParseRequests(strings.NewReader(ok), 0); err == nil {
		t.Error("block size 0 accepted")
	}
}

func TestLoadAndExpand(t *testing.T) {
	root := t.TempDir()
	write := func(rel, data string) {
		t.Helper()
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b/experiment.json", sharedPrefixJSON)
	trace := strings.Replace(sharedPrefixJSON, `"kind": "inference_perf_shared_prefix"`, `"kind": "request_trace"`, 1)
	write("a/experiment.json", strings.Replace(trace, `"t-shared"`, `"t-trace"`, 1))
	write("a/requests.jsonl", traceLines)
	write("c/notes.txt", "not an experiment")

	dirs, err := Expand([]string{root, filepath.Join(root, "b")})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "b")}
	if strings.Join(dirs, ",") != strings.Join(want, ",") {
		t.Fatalf("Expand = %v, want %v", dirs, want)
	}
	exp, err := Load(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	if exp.ID != "t-trace" || len(exp.Requests) != 2 || exp.Dir != dirs[0] {
		t.Fatalf("loaded %s with %d requests from %s", exp.ID, len(exp.Requests), exp.Dir)
	}
	if _, err := Expand([]string{filepath.Join(root, "c")}); err == nil {
		t.Error("a folder without experiments was accepted")
	}

	write("d/experiment.json", strings.Replace(trace, `"t-shared"`, `"t-d"`, 1))
	_, err = Load(filepath.Join(root, "d"))
	if err == nil || !strings.Contains(err.Error(), RequestsFile) {
		t.Errorf("missing requests.jsonl: error %v, want one naming it", err)
	}
	write("e/experiment.json", strings.Replace(sharedPrefixJSON, `"tp": 1`, `"tp": 0`, 1))
	_, err = Load(filepath.Join(root, "e"))
	if err == nil || !strings.Contains(err.Error(), filepath.Join("e", ExperimentFile)) || !strings.Contains(err.Error(), "engine.tp") {
		t.Errorf("bad experiment: error %v, want one naming the file and the field", err)
	}
}

func TestDirFollowsTheSetting(t *testing.T) {
	abs := t.TempDir()
	t.Setenv(EnvDir, abs)
	if Dir() != abs || CalibrationDir() != filepath.Join(abs, Calibration) {
		t.Fatalf("Dir = %s with %s=%s", Dir(), EnvDir, abs)
	}
	if _, err := FindCalibration(); err == nil || !strings.Contains(err.Error(), EnvDir) {
		t.Fatalf("missing folder: error %v, want one naming %s", err, EnvDir)
	}
	t.Setenv(EnvDir, "")
	if !strings.HasSuffix(Dir(), filepath.FromSlash("shared/data/groundtruth")) {
		t.Fatalf("default Dir = %s", Dir())
	}
}

// TestCalibrationSetLoads reads every experiment of the real calibration
// set (found through SWITCHYARD_GROUNDTRUTH_DIR; skipped when absent, a
// failure under CI).
func TestCalibrationSetLoads(t *testing.T) {
	dirs, err := Expand([]string{RequireCalibration(t)})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, dir := range dirs {
		exp, err := Load(dir)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		kinds[exp.Workload.Kind]++
		if exp.Workload.Kind == RequestTrace && exp.Workload.Simulatable && len(exp.Requests) == 0 {
			t.Errorf("%s: no requests", exp.ID)
		}
	}
	if kinds[SharedPrefix] == 0 || kinds[RequestTrace] == 0 {
		t.Errorf("workload kinds %v, want both", kinds)
	}
}
