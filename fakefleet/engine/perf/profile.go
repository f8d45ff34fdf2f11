package perf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"switchyard/fakefleet/engine"
)

// MaxProfileBytes caps a profile file; real ones are a few KiB.
const MaxProfileBytes = 1 << 20

// ErrProfile is wrapped by every profile parsing and validation error.
var ErrProfile = errors.New("perf: invalid profile")

// Profile is one deployment's engine model: which model on which GPUs in
// which layout, the coefficients pricing its steps, vLLM's scheduler
// settings and KV capacity, and the fixed time outside the engine.
type Profile struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Model and GPU are the experiments' `model` and `hardware` objects.
	Model ModelSpec `json:"model"`
	GPU   GPUSpec   `json:"hardware"`
	// TP GPUs run one engine rank; DP ranks share nothing but, with
	// ExpertParallel, the routed experts, which are split over them.
	TP             int  `json:"tp"`
	DP             int  `json:"dp"`
	ExpertParallel bool `json:"expert_parallel,omitempty"`

	Coefficients Coefficients   `json:"coefficients"`
	Engine       EngineSettings `json:"engine"`
	Overheads    Overheads      `json:"overheads"`
	// Fit records how the coefficients were obtained, for people reading
	// the file; nothing reads it back.
	Fit *FitRecord `json:"fit,omitempty"`
}

// EngineSettings are vLLM's scheduler and cache settings, named as vLLM's
// flags and the experiments' `engine` object. Zero values take vLLM's
// defaults (see WithDefaults).
type EngineSettings struct {
	MaxNumBatchedTokens  int     `json:"max_num_batched_tokens"`
	MaxNumSeqs           int     `json:"max_num_seqs"`
	MaxModelLen          int     `json:"max_model_len"` // 0: no cap
	GPUMemoryUtilization float64 `json:"gpu_memory_utilization"`
	BlockSize            int     `json:"block_size"`
	EnablePrefixCaching  *bool   `json:"enable_prefix_caching,omitempty"`
	EnableChunkedPrefill *bool   `json:"enable_chunked_prefill,omitempty"`
	// NumGPUBlocks is the KV capacity vLLM logged, when known; it wins
	// over the estimate from GPU memory.
	NumGPUBlocks int `json:"num_gpu_blocks,omitempty"`
	// ReservedGiB is the memory per GPU held outside weights and KV
	// (activations, CUDA graphs, the CUDA context); 0 = DefaultReservedGiB.
	ReservedGiB float64 `json:"reserved_gib,omitempty"`
}

// DefaultReservedGiB is a typical vLLM activation and CUDA-graph reserve
// for models of 7–70 B parameters.
const DefaultReservedGiB = 1.5

// Overheads are times outside the engine's steps.
type Overheads struct {
	// RequestMs is added once to a request's TTFT (and so its end-to-end
	// latency) by whoever measures from the client: HTTP, tokenization,
	// queueing into the engine, detokenization of the first chunk.
	RequestMs float64 `json:"request_ms"`
}

// FitRecord describes a fit: what was fitted how, on which experiments,
// to what loss, and when.
type FitRecord struct {
	Method      string   `json:"method"`
	Loss        string   `json:"loss,omitempty"` // what Objective measures
	Experiments []string `json:"experiments,omitempty"`
	Objective   float64  `json:"objective"`
	Evaluations int      `json:"evaluations"`
	// Restarts is how many searches followed the first, each from a
	// fresh simplex around the best point (0: one search).
	Restarts int `json:"restarts,omitempty"`
	// Scale and Seed are the workload share and seed the loss simulated
	// at; FullScaleObjective is the loss of the result on the whole
	// workloads, when it was checked.
	Scale              float64 `json:"scale,omitempty"`
	Seed               uint64  `json:"seed,omitempty"`
	FullScaleObjective float64 `json:"full_scale_objective,omitempty"`
	Date               string  `json:"date,omitempty"` // YYYY-MM-DD, UTC
}

// ParseProfile decodes and validates a profile. Unknown fields are errors,
// so a misspelt setting is not silently ignored.
func ParseProfile(data []byte) (Profile, error) {
	if len(data) > MaxProfileBytes {
		return Profile{}, fmt.Errorf("%w: %d bytes, more than %d", ErrProfile, len(data), MaxProfileBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Profile
	if err := dec.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("%w: %v", ErrProfile, err)
	}
	if dec.More() {
		return Profile{}, fmt.Errorf("%w: data after the profile object", ErrProfile)
	}
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

// LoadProfile reads and parses a profile file.
func LoadProfile(path string) (Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return Profile{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxProfileBytes+1))
	if err != nil {
		return Profile{}, err
	}
	p, err := ParseProfile(data)
	if err != nil {
		return Profile{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Marshal encodes p as indented JSON, the format ParseProfile reads.
func (p Profile) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WithDefaults fills zero settings with vLLM's defaults (2,048 batched
// tokens, 256 sequences, 16-token blocks, 90 % of GPU memory), TP and DP
// with 1 and the reserve with DefaultReservedGiB.
func (p Profile) WithDefaults() Profile {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&p.TP, 1)
	def(&p.DP, 1)
	e := &p.Engine
	def(&e.MaxNumBatchedTokens, 2048)
	def(&e.MaxNumSeqs, 256)
	def(&e.BlockSize, 16)
	if e.GPUMemoryUtilization <= 0 {
		e.GPUMemoryUtilization = 0.9
	}
	if e.ReservedGiB <= 0 {
		e.ReservedGiB = DefaultReservedGiB
	}
	return p
}

// Validate checks every number the model divides by or allocates from,
// naming the field that is wrong.
func (p Profile) Validate() error {
	wrap := func(err error) error { return fmt.Errorf("%w: %v", ErrProfile, err) }
	if err := p.Model.Validate("model"); err != nil {
		return wrap(err)
	}
	if err := p.GPU.Validate("hardware"); err != nil {
		return wrap(err)
	}
	if p.TP <= 0 || p.TP > 1024 || p.DP <= 0 || p.DP > 1024 {
		return wrap(fmt.Errorf("tp %d, dp %d: each must be 1..1024", p.TP, p.DP))
	}
	c := p.Coefficients
	for _, f := range []struct {
		name string
		v    float64
	}{{"matmul_efficiency", c.MatmulEfficiency}, {"attention_efficiency", c.AttentionEfficiency}, {"bandwidth_efficiency", c.BandwidthEfficiency},
		{"kv_bandwidth_efficiency", c.kvBandwidthEfficiency()}} {
		if !positive(f.v) || f.v > 1 {
			return wrap(fmt.Errorf("coefficients.%s: %v is not in (0, 1]", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"coefficients.step_overhead_us", c.StepOverheadUs}, {"coefficients.seq_overhead_us", c.SeqOverheadUs},
		{"coefficients.allreduce_us", c.AllReduceUs}, {"coefficients.allreduce_step_us", c.AllReduceStepUs},
		{"coefficients.pcie_collective_us", c.PCIeCollectiveUs}, {"coefficients.sampling_ns_per_logit", c.SamplingNsPerLogit},
		{"overheads.request_ms", p.Overheads.RequestMs},
		{"engine.reserved_gib", p.Engine.ReservedGiB}} {
		if f.v < 0 || math.IsNaN(f.v) || f.v > 1e7 {
			return wrap(fmt.Errorf("%s: %v is not a non-negative time", f.name, f.v))
		}
	}
	e := p.Engine
	if e.MaxNumBatchedTokens <= 0 || e.MaxNumSeqs <= 0 || e.BlockSize <= 0 || e.GPUMemoryUtilization <= 0 {
		return wrap(fmt.Errorf("engine: max_num_batched_tokens, max_num_seqs, block_size and gpu_memory_utilization must be positive (see WithDefaults)"))
	}
	if e.MaxNumBatchedTokens > 1<<24 || e.MaxNumSeqs > 1<<20 || e.BlockSize > 1<<12 || e.MaxModelLen < 0 || e.MaxModelLen > 1<<26 ||
		e.NumGPUBlocks < 0 || e.NumGPUBlocks > 1<<28 {
		return wrap(fmt.Errorf("engine: a size is out of range"))
	}
	if e.GPUMemoryUtilization > 1 || math.IsNaN(e.GPUMemoryUtilization) {
		return wrap(fmt.Errorf("engine.gpu_memory_utilization: %v is not in (0, 1]", e.GPUMemoryUtilization))
	}
	if _, err := p.KVBlocks(); err != nil {
		return err
	}
	return nil
}

// KVBlocks is one rank's KV capacity in blocks: NumGPUBlocks when vLLM's
// figure is known, else what vLLM would find on each GPU —
// gpu_memory_utilization × memory − the GPU's share of the weights − the
// reserve — over the GPU's share of a token's KV.
func (p Profile) KVBlocks() (int, error) {
	if p.Engine.NumGPUBlocks > 0 {
		return p.Engine.NumGPUBlocks, nil
	}
	m := p.Model
	ep := 1
	if p.ExpertParallel {
		ep = p.DP
	}
	weights := (m.ParamsTotal - m.routedExpertParams()*(1-1/float64(ep))) * m.WeightBytesPerParam / float64(p.TP)
	free := p.Engine.GPUMemoryUtilization*p.GPU.MemoryGB*gib - weights - p.Engine.ReservedGiB*gib
	perToken := m.KVCacheBytesPerToken / float64(min(p.TP, m.NumKeyValueHeads))
	blocks := math.Floor(free / perToken / float64(p.Engine.BlockSize))
	if blocks < 1 {
		return 0, fmt.Errorf("%w: the weights (%.1f GiB per GPU) leave no room for KV in %.0f%% of %v GiB",
			ErrProfile, weights/gib, p.Engine.GPUMemoryUtilization*100, p.GPU.MemoryGB)
	}
	return int(min(blocks, 1<<28)), nil
}

const gib = 1 << 30

// Timing is the profile's step-time model for one rank.
func (p Profile) Timing() *Roofline {
	ep := 1
	if p.ExpertParallel {
		ep = p.DP
	}
	return newRoofline(p.Model, p.GPU, p.TP, ep, p.Coefficients)
}

// EngineConfig is the engine configuration of one data-parallel rank.
func (p Profile) EngineConfig() (engine.Config, error) {
	blocks, err := p.KVBlocks()
	if err != nil {
		return engine.Config{}, err
	}
	e := p.Engine
	return engine.Config{
		BlockSize:             e.BlockSize,
		TotalKVBlocks:         blocks,
		MaxNumBatchedTokens:   e.MaxNumBatchedTokens,
		MaxNumSeqs:            e.MaxNumSeqs,
		MaxModelLen:           e.MaxModelLen,
		DisablePrefixCaching:  e.EnablePrefixCaching != nil && !*e.EnablePrefixCaching,
		DisableChunkedPrefill: e.EnableChunkedPrefill != nil && !*e.EnableChunkedPrefill,
		SpeedupRatio:          1,
		Timing:                p.Timing(),
	}, nil
}
