package perf

import (
	"encoding/json"
	"errors"
	"testing"
)

// syntheticExperiment is shaped like a calibration experiment.json, with
// made-up numbers and the extra sections the deployment reader skips.
func syntheticExperiment(t testing.TB, edit func(map[string]any)) []byte {
	m := map[string]any{
		"id": "x-test", "schema": "switchyard-groundtruth/v1",
		"model":    denseModel(),
		"hardware": testGPU(),
		"engine": map[string]any{"name": "vllm", "tp": 2, "dp": 1, "max_num_batched_tokens": 4096,
			"max_num_seqs": 64, "max_model_len": nil, "gpu_memory_utilization": 0.85, "block_size": 16,
			"enable_prefix_caching": false, "num_gpu_blocks": nil, "provenance": map[string]any{"tp": "test"}},
		"workload": map[string]any{"kind": "request_trace"},
		"measured": map[string]any{"stages": []any{}},
	}
	if edit != nil {
		edit(m)
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestFromExperiment(t *testing.T) {
	base := testProfile()
	base.Coefficients.StepOverheadUs = 777
	base.Overheads.RequestMs = 12
	p, err := FromExperiment(syntheticExperiment(t, nil), base)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "x-test" || p.TP != 2 || p.DP != 1 || p.Model.NumLayers != 32 || p.GPU.HBMBandwidthTBps != 2 {
		t.Fatalf("deployment %+v", p)
	}
	if p.Coefficients.StepOverheadUs != 777 || p.Overheads.RequestMs != 12 {
		t.Fatal("coefficients and overheads come from the base profile")
	}
	cfg, err := p.EngineConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxNumBatchedTokens != 4096 || cfg.MaxNumSeqs != 64 || cfg.MaxModelLen != 0 || !cfg.DisablePrefixCaching ||
		cfg.DisableChunkedPrefill || cfg.BlockSize != 16 {
		t.Fatalf("engine config %+v", cfg)
	}

	unknownGPU := syntheticExperiment(t, func(m map[string]any) {
		m["hardware"] = map[string]any{"gpu": "unknown", "memory_gb": nil, "hbm_bandwidth_tbps": nil}
	})
	if _, err := FromExperiment(unknownGPU, base); !errors.Is(err, ErrProfile) {
		t.Fatalf("unknown GPU: %v", err)
	}
	if _, err := FromExperiment([]byte(`{"model": 7}`), base); !errors.Is(err, ErrProfile) {
		t.Fatalf("malformed: %v", err)
	}
}

func FuzzFromExperiment(f *testing.F) {
	f.Add(syntheticExperiment(f, nil))
	f.Add([]byte(`{"engine":{"tp":-1}}`))
	base := testProfile()
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := FromExperiment(data, base)
		if err != nil {
			if !errors.Is(err, ErrProfile) {
				t.Fatalf("error %v does not wrap ErrProfile", err)
			}
			return
		}
		if _, err := p.EngineConfig(); err != nil {
			t.Fatalf("a valid profile must give an engine config: %v", err)
		}
	})
}
