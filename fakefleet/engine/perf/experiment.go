package perf

import (
	"encoding/json"
	"fmt"
)

// MaxExperimentBytes caps an experiment.json read by FromExperiment; the
// calibration set's largest is about 100 KiB.
const MaxExperimentBytes = 16 << 20

// experimentDeployment is the part of an experiment.json (schema
// switchyard-groundtruth/v1) that describes the deployment; the rest of
// the file (workload, measurements, baselines) is not read here.
type experimentDeployment struct {
	ID       string    `json:"id"`
	Model    ModelSpec `json:"model"`
	Hardware GPUSpec   `json:"hardware"`
	Engine   struct {
		TP                   int     `json:"tp"`
		DP                   int     `json:"dp"`
		ExpertParallel       bool    `json:"expert_parallel"`
		MaxNumBatchedTokens  int     `json:"max_num_batched_tokens"`
		MaxNumSeqs           int     `json:"max_num_seqs"`
		MaxModelLen          int     `json:"max_model_len"`
		GPUMemoryUtilization float64 `json:"gpu_memory_utilization"`
		BlockSize            int     `json:"block_size"`
		EnablePrefixCaching  *bool   `json:"enable_prefix_caching"`
		EnableChunkedPrefill *bool   `json:"enable_chunked_prefill"`
		NumGPUBlocks         int     `json:"num_gpu_blocks"`
	} `json:"engine"`
}

// FromExperiment builds a profile for the deployment an experiment.json
// describes: its model, GPU, layout and vLLM settings, with coefficients
// and overheads taken from base (the coefficients being fitted, or a
// fitted profile's). Unknown fields are ignored: the file holds far more
// than the deployment. An experiment on an unknown GPU is an error.
func FromExperiment(data []byte, base Profile) (Profile, error) {
	if len(data) > MaxExperimentBytes {
		return Profile{}, fmt.Errorf("%w: experiment of %d bytes, more than %d", ErrProfile, len(data), MaxExperimentBytes)
	}
	var x experimentDeployment
	if err := json.Unmarshal(data, &x); err != nil {
		return Profile{}, fmt.Errorf("%w: experiment: %v", ErrProfile, err)
	}
	e := x.Engine
	p := Profile{
		Name: x.ID, Model: x.Model, GPU: x.Hardware,
		TP: e.TP, DP: e.DP, ExpertParallel: e.ExpertParallel,
		Coefficients: base.Coefficients, Overheads: base.Overheads,
		Engine: EngineSettings{
			MaxNumBatchedTokens: e.MaxNumBatchedTokens, MaxNumSeqs: e.MaxNumSeqs, MaxModelLen: e.MaxModelLen,
			GPUMemoryUtilization: e.GPUMemoryUtilization, BlockSize: e.BlockSize,
			EnablePrefixCaching: e.EnablePrefixCaching, EnableChunkedPrefill: e.EnableChunkedPrefill,
			NumGPUBlocks: e.NumGPUBlocks, ReservedGiB: base.Engine.ReservedGiB,
		},
	}.WithDefaults()
	if err := p.Validate(); err != nil {
		return Profile{}, fmt.Errorf("experiment %q: %w", x.ID, err)
	}
	return p, nil
}
