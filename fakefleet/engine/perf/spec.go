// Package perf prices engine steps from physics: a model's architecture
// numbers and a GPU's datasheet give the compute and memory traffic of a
// step, and a few fitted coefficients turn them into time. A Profile binds
// a model, a GPU, a parallel layout, coefficients and the engine's
// scheduler settings, and loads from a JSON file (docs/engine-model.md).
package perf

import (
	"fmt"
	"math"
	"strings"
)

// ModelSpec is a model's architecture as the groundtruth experiments'
// `model` object spells it (numbers from the model's config.json), so that
// object can be pasted into a profile as it is.
type ModelSpec struct {
	HFName            string   `json:"hf_name"`
	Architecture      string   `json:"architecture,omitempty"`
	NumLayers         int      `json:"num_layers"`
	HiddenSize        int      `json:"hidden_size"`
	IntermediateSize  int      `json:"intermediate_size"`
	NumAttentionHeads int      `json:"num_attention_heads"`
	NumKeyValueHeads  int      `json:"num_key_value_heads"`
	HeadDim           int      `json:"head_dim"`
	VocabSize         int      `json:"vocab_size"`
	TieWordEmbeddings bool     `json:"tie_word_embeddings"`
	ConfigTorchDtype  string   `json:"config_torch_dtype,omitempty"`
	MoE               *MoESpec `json:"moe"`
	// ParamsTotal counts every weight; ParamsActivePerToken those one
	// token runs through (all of them for a dense model).
	ParamsTotal          float64 `json:"params_total"`
	ParamsActivePerToken float64 `json:"params_active_per_token"`
	ParamsMethod         string  `json:"params_method,omitempty"`
	ParamsModelCard      string  `json:"params_model_card,omitempty"`
	WeightBytesPerParam  float64 `json:"weight_bytes_per_param"`
	// KVCacheBytesPerToken is the whole model's KV per token:
	// 2 (K and V) · layers · KV heads · head dim · bytes per value.
	KVCacheBytesPerToken float64 `json:"kv_cache_bytes_per_token"`
	Weights              string  `json:"weights,omitempty"`
	VisionTower          string  `json:"vision_tower,omitempty"`
	Note                 string  `json:"note,omitempty"`
	ConfigSource         *Source `json:"config_source,omitempty"`
}

// MoESpec describes a mixture-of-experts model's expert layers.
type MoESpec struct {
	NumExperts                   int `json:"num_experts"`
	ExpertsPerToken              int `json:"experts_per_token"`
	ExpertIntermediateSize       int `json:"expert_intermediate_size"`
	SharedExpertIntermediateSize int `json:"shared_expert_intermediate_size"`
	// MoELayers is "all" (possibly with a remark in parentheses) or a
	// count of expert layers.
	MoELayers string `json:"moe_layers"`
}

// Source names where a spec's numbers were copied from.
type Source struct {
	Repo    string `json:"repo,omitempty"`
	Commit  string `json:"commit,omitempty"`
	Path    string `json:"path,omitempty"`
	Licence string `json:"licence,omitempty"`
	Note    string `json:"note,omitempty"`
}

// GPUSpec is one GPU's datasheet as the experiments' `hardware` object
// spells it, plus InterconnectGBps, which the experiments give only as
// prose in Interconnect.
type GPUSpec struct {
	GPU                 string  `json:"gpu"`
	HardwareKey         string  `json:"hardware_key,omitempty"`
	NumGPUs             int     `json:"num_gpus,omitempty"`
	MemoryGB            float64 `json:"memory_gb"` // read as GiB, as GPUs report it
	HBMBandwidthTBps    float64 `json:"hbm_bandwidth_tbps"`
	PeakBF16TFlopsDense float64 `json:"peak_bf16_tflops_dense"`
	PeakFP8TFlopsDense  float64 `json:"peak_fp8_tflops_dense"`
	Interconnect        string  `json:"interconnect,omitempty"`
	Source              string  `json:"source,omitempty"`
	// InterconnectGBps is the one-direction GPU-to-GPU bandwidth that
	// tensor-parallel all-reduces move data at; 0 takes a figure guessed
	// from Interconnect (see linkBandwidth).
	InterconnectGBps float64 `json:"interconnect_gbps,omitempty"`
}

// moeLayers is how many layers hold experts.
func (m ModelSpec) moeLayers() int {
	if m.MoE == nil {
		return 0
	}
	var n int
	if _, err := fmt.Sscanf(m.MoE.MoELayers, "%d", &n); err == nil && n > 0 && n <= m.NumLayers {
		return n
	}
	return m.NumLayers // "all", with or without a remark
}

// expertParams is the weight count of one routed expert in one layer
// (a gated MLP: gate, up and down projections).
func (m ModelSpec) expertParams() float64 {
	if m.MoE == nil {
		return 0
	}
	return 3 * float64(m.HiddenSize) * float64(m.MoE.ExpertIntermediateSize)
}

// routedExpertParams is the weight count of every routed expert.
func (m ModelSpec) routedExpertParams() float64 {
	if m.MoE == nil {
		return 0
	}
	return float64(m.moeLayers()) * float64(m.MoE.NumExperts) * m.expertParams()
}

// embeddingParams is the input embedding table, which a step gathers rows
// of rather than reading whole.
func (m ModelSpec) embeddingParams() float64 {
	if m.TieWordEmbeddings {
		return 0 // the table is the LM head too, which is read whole
	}
	return float64(m.VocabSize) * float64(m.HiddenSize)
}

// lmHeadParams is the output projection, run only for sampled positions.
func (m ModelSpec) lmHeadParams() float64 { return float64(m.VocabSize) * float64(m.HiddenSize) }

// Validate reports the first missing or impossible number, by field path.
func (m ModelSpec) Validate(path string) error {
	ints := []struct {
		name string
		v    int
	}{{"num_layers", m.NumLayers}, {"hidden_size", m.HiddenSize}, {"num_attention_heads", m.NumAttentionHeads},
		{"num_key_value_heads", m.NumKeyValueHeads}, {"head_dim", m.HeadDim}, {"vocab_size", m.VocabSize}}
	for _, f := range ints {
		if f.v <= 0 || f.v > 1<<24 {
			return fmt.Errorf("%s.%s: %d is not a positive size", path, f.name, f.v)
		}
	}
	floats := []struct {
		name string
		v    float64
	}{{"params_total", m.ParamsTotal}, {"params_active_per_token", m.ParamsActivePerToken},
		{"weight_bytes_per_param", m.WeightBytesPerParam}, {"kv_cache_bytes_per_token", m.KVCacheBytesPerToken}}
	for _, f := range floats {
		if !positive(f.v) {
			return fmt.Errorf("%s.%s: %v is not a positive number", path, f.name, f.v)
		}
	}
	if m.ParamsActivePerToken > m.ParamsTotal {
		return fmt.Errorf("%s.params_active_per_token: %v exceeds params_total %v", path, m.ParamsActivePerToken, m.ParamsTotal)
	}
	if m.MoE != nil {
		e := m.MoE
		if e.NumExperts <= 0 || e.ExpertsPerToken <= 0 || e.ExpertsPerToken > e.NumExperts || e.ExpertIntermediateSize <= 0 {
			return fmt.Errorf("%s.moe: needs 0 < experts_per_token <= num_experts and expert_intermediate_size > 0", path)
		}
		if m.routedExpertParams() >= m.ParamsTotal {
			return fmt.Errorf("%s.moe: the experts alone (%v params) exceed params_total", path, m.routedExpertParams())
		}
	}
	return nil
}

// Validate reports the first missing or impossible datasheet figure.
func (g GPUSpec) Validate(path string) error {
	floats := []struct {
		name string
		v    float64
	}{{"memory_gb", g.MemoryGB}, {"hbm_bandwidth_tbps", g.HBMBandwidthTBps}, {"peak_bf16_tflops_dense", g.PeakBF16TFlopsDense}}
	for _, f := range floats {
		if !positive(f.v) {
			return fmt.Errorf("%s.%s: %v is not a positive number (unknown GPU?)", path, f.name, f.v)
		}
	}
	if g.PeakFP8TFlopsDense < 0 || math.IsNaN(g.PeakFP8TFlopsDense) || g.InterconnectGBps < 0 || math.IsNaN(g.InterconnectGBps) {
		return fmt.Errorf("%s: peak_fp8_tflops_dense and interconnect_gbps must be non-negative", path)
	}
	return nil
}

// linkBandwidth is the GPU-to-GPU bandwidth in bytes per second. Without
// InterconnectGBps it reads the link family from Interconnect: NVLink
// 4 at 450 GB/s each way (900 GB/s is both directions), NVLink 3 at 300,
// PCIe Gen5 x16 at 64 and Gen4 at 32; anything else counts as PCIe Gen4.
func (g GPUSpec) linkBandwidth() float64 {
	if g.InterconnectGBps > 0 {
		return g.InterconnectGBps * 1e9
	}
	s := strings.ToLower(g.Interconnect)
	switch {
	case strings.Contains(s, "nvlink 3"), strings.Contains(s, "nvlink3"):
		return 300e9
	case strings.Contains(s, "nvlink"):
		return 450e9
	case strings.Contains(s, "gen5"):
		return 64e9
	}
	return 32e9
}

// onPCIe says whether the GPUs are joined by PCIe: every link the
// Interconnect text does not name as NVLink (linkBandwidth's guess too).
func (g GPUSpec) onPCIe() bool {
	return !strings.Contains(strings.ToLower(g.Interconnect), "nvlink")
}

func positive(v float64) bool { return v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }
