// Package validate simulates ground-truth experiments (real vLLM runs, read
// by internal/groundtruth) on the engine model and scores the predictions
// the way the data's README defines: APE and MPE of TTFT mean and p90, E2E
// mean and p90, and the per-token time.
//
// Run simulates one experiment for a seed in virtual time (no wall clock)
// and returns a Prediction; Score compares a Prediction with the
// measurements. A Setup is the seam to the timing model: an engine.Config
// per rank and the fixed client overhead, chosen by a Configure function
// per experiment (Mocker today; calibrated profiles plug in the same way).
package validate

import (
	"errors"
	"fmt"
	"math"
	"time"

	"switchyard/fakefleet/engine"
	"switchyard/internal/groundtruth"
)

// Setup is what the simulation of one experiment takes from a timing
// profile.
type Setup struct {
	// Engine configures each data-parallel rank (Engine.Timing prices steps).
	Engine engine.Config
	// ClientOverhead is added to TTFT and E2E where the set measured them
	// client-side (inference-perf: HTTP, tokenization, detokenization);
	// 0 until fitted.
	ClientOverhead time.Duration
	// FirstChunkTokens is how many generated tokens the first streamed
	// chunk the client timed TTFT on carries (0 means 1). inference-perf's
	// streamed chunks arrive in pairs (the data's trap 1), so its TTFT is
	// the second token's time.
	FirstChunkTokens int
}

// Configure chooses the Setup for an experiment, or says why it cannot
// (an unknown GPU, no KV capacity, ...).
type Configure func(*groundtruth.Experiment) (Setup, error)

// ErrNotSimulatable is wrapped by every reason an experiment is not run.
var ErrNotSimulatable = errors.New("not simulatable")

// Check says why exp cannot be simulated at all, whatever the profile:
// its status or recipe says so, or it has nothing to drive the engine.
func Check(exp *groundtruth.Experiment) error {
	w := exp.Workload
	switch {
	case !exp.Status.Simulatable:
		return fmt.Errorf("%w: status.simulatable is false (recipe: %s)", ErrNotSimulatable, orNone(w.RecipeStatus))
	case !w.Simulatable:
		return fmt.Errorf("%w: workload.simulatable is false (recipe: %s)", ErrNotSimulatable, orNone(w.RecipeStatus))
	case w.Kind == groundtruth.SharedPrefix && w.SharedPrefix == nil:
		return fmt.Errorf("%w: missing recipe (workload.shared_prefix)", ErrNotSimulatable)
	case w.Kind == groundtruth.RequestTrace && len(exp.Requests) == 0:
		return fmt.Errorf("%w: missing requests (%s)", ErrNotSimulatable, groundtruth.RequestsFile)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none given"
	}
	return s
}

// Mocker is the Setup of the current engine model: Dynamo's mocker
// polynomial, the experiment's scheduler limits and block size, KV capacity
// from the vLLM log or else from GPU memory, and no client overhead. It is
// the baseline a calibrated profile has to beat.
func Mocker(exp *groundtruth.Experiment) (Setup, error) {
	blocks, err := KVBlocksPerRank(exp)
	if err != nil {
		return Setup{}, err
	}
	return Setup{Engine: engine.Config{
		BlockSize:           exp.Engine.BlockSize,
		TotalKVBlocks:       blocks,
		MaxNumBatchedTokens: exp.Engine.MaxNumBatchedTokens,
		MaxNumSeqs:          exp.Engine.MaxNumSeqs,
		Timing:              engine.Mocker{},
	}}, nil
}

// KVBlocksPerRank is one rank's KV capacity in blocks: num_gpu_blocks when
// vLLM logged it, otherwise what is left of gpu_memory_utilization of the
// rank's GPUs after the weights, divided by the KV bytes of a block. With
// expert parallelism the weights are taken as spread over every GPU (the
// experts dominate them). It is an estimate: vLLM also sets aside
// activation and CUDA-graph memory.
func KVBlocksPerRank(exp *groundtruth.Experiment) (int, error) {
	g := exp.Engine
	if g.NumGPUBlocks != nil {
		return *g.NumGPUBlocks, nil
	}
	m, h := exp.Model, exp.Hardware
	if h.MemoryGB == nil || *h.MemoryGB <= 0 {
		return 0, fmt.Errorf("%w: unknown GPU (%q): no memory_gb and no num_gpu_blocks to size the KV cache", ErrNotSimulatable, h.GPU)
	}
	if m.KVCacheBytesPerToken <= 0 || m.ParamsTotal <= 0 || m.WeightBytesPerParam <= 0 {
		return 0, fmt.Errorf("%w: model lacks params_total, weight_bytes_per_param or kv_cache_bytes_per_token to size the KV cache", ErrNotSimulatable)
	}
	gpus := float64(g.TP)
	weightShards := gpus
	if g.ExpertParallel {
		weightShards *= float64(g.DP)
	}
	free := *h.MemoryGB*1e9*g.GPUMemoryUtilization*gpus - m.ParamsTotal*m.WeightBytesPerParam/weightShards*gpus
	blocks := math.Floor(free / (m.KVCacheBytesPerToken * float64(g.BlockSize)))
	if blocks < 1 {
		return 0, fmt.Errorf("%w: the weights (%.1f GB) leave no KV cache in %.0f GB × %d GPUs", ErrNotSimulatable,
			m.ParamsTotal*m.WeightBytesPerParam/1e9, *h.MemoryGB, g.TP)
	}
	return int(min(blocks, 1<<26)), nil
}
