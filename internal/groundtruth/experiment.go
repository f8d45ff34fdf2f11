package groundtruth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// Schema is the only experiment.json schema this package reads.
const Schema = "switchyard-groundtruth/v1"

// File names inside an experiment folder.
const (
	ExperimentFile = "experiment.json"
	RequestsFile   = "requests.jsonl"
)

// Workload kinds.
const (
	SharedPrefix  = "inference_perf_shared_prefix"
	RequestTrace  = "request_trace"
	maxExperiment = 4 << 20 // bytes of experiment.json
	maxStages     = 64
	maxStageReqs  = 10_000_000 // requests over all stages of one experiment
	maxPrompts    = 1 << 16    // distinct prompts of a shared-prefix recipe
	maxLen        = 1 << 20    // tokens of one prompt part or output
	maxBlockSize  = 1024
	maxParallel   = 1024 // tp, dp
)

// ErrInvalid is wrapped by every error about a file's content.
var ErrInvalid = errors.New("invalid ground-truth data")

// Experiment is one experiment folder: experiment.json, and the requests of
// requests.jsonl for per-request sets. Only the fields the simulation and
// the scoring use are decoded; the rest of the file is ignored.
type Experiment struct {
	Schema    string              `json:"schema"`
	ID        string              `json:"id"`
	Split     string              `json:"split"`
	Status    Status              `json:"status"`
	Model     Model               `json:"model"`
	Hardware  Hardware            `json:"hardware"`
	Engine    Engine              `json:"engine"`
	Workload  Workload            `json:"workload"`
	Measured  Measured            `json:"measured"`
	Baselines map[string]Baseline `json:"baselines"`
	Notes     []string            `json:"notes"`

	// Dir is the folder the experiment was read from.
	Dir string `json:"-"`
	// Requests are requests.jsonl's lines (request_trace workloads only).
	Requests []Request `json:"-"`
}

// Status says what the experiment can be used for.
type Status struct {
	Simulatable bool `json:"simulatable"`
	// Overloaded is false, true, or a sentence ("partly ...").
	Overloaded     any  `json:"overloaded"`
	PerRequestData bool `json:"per_request_data"`
}

// IsOverloaded reports any overload, partial ones included.
func (s Status) IsOverloaded() bool {
	b, isBool := s.Overloaded.(bool)
	return (isBool && b) || (!isBool && s.Overloaded != nil)
}

// Model holds the architecture numbers of the served model.
type Model struct {
	HFName               string  `json:"hf_name"`
	Architecture         string  `json:"architecture"`
	NumLayers            int     `json:"num_layers"`
	HiddenSize           int     `json:"hidden_size"`
	IntermediateSize     int     `json:"intermediate_size"`
	NumAttentionHeads    int     `json:"num_attention_heads"`
	NumKeyValueHeads     int     `json:"num_key_value_heads"`
	HeadDim              int     `json:"head_dim"`
	VocabSize            int     `json:"vocab_size"`
	MoE                  *MoE    `json:"moe"`
	ParamsTotal          float64 `json:"params_total"`
	ParamsActivePerToken float64 `json:"params_active_per_token"`
	WeightBytesPerParam  float64 `json:"weight_bytes_per_param"`
	KVCacheBytesPerToken float64 `json:"kv_cache_bytes_per_token"`
}

// MoE describes a mixture-of-experts model's experts.
type MoE struct {
	NumExperts                   int `json:"num_experts"`
	ExpertsPerToken              int `json:"experts_per_token"`
	ExpertIntermediateSize       int `json:"expert_intermediate_size"`
	SharedExpertIntermediateSize int `json:"shared_expert_intermediate_size"`
	// MoELayers says which layers are MoE: a count or a sentence ("all").
	MoELayers any `json:"moe_layers"`
}

// Hardware is the GPU the run used; the figures are null when unknown.
type Hardware struct {
	GPU              string   `json:"gpu"`
	HardwareKey      string   `json:"hardware_key"`
	NumGPUs          int      `json:"num_gpus"`
	MemoryGB         *float64 `json:"memory_gb"`
	HBMBandwidthTBps *float64 `json:"hbm_bandwidth_tbps"`
	PeakBF16TFLOPS   *float64 `json:"peak_bf16_tflops_dense"`
	PeakFP8TFLOPS    *float64 `json:"peak_fp8_tflops_dense"`
	Interconnect     *string  `json:"interconnect"`
	Source           string   `json:"source"`
}

// Engine is the vLLM configuration of the run.
type Engine struct {
	Version              string  `json:"version"`
	TP                   int     `json:"tp"`
	DP                   int     `json:"dp"`
	ExpertParallel       bool    `json:"expert_parallel"`
	MaxNumBatchedTokens  int     `json:"max_num_batched_tokens"`
	MaxNumSeqs           int     `json:"max_num_seqs"`
	MaxModelLen          *int    `json:"max_model_len"`
	GPUMemoryUtilization float64 `json:"gpu_memory_utilization"`
	BlockSize            int     `json:"block_size"`
	EnablePrefixCaching  bool    `json:"enable_prefix_caching"`
	EnableChunkedPrefill bool    `json:"enable_chunked_prefill"`
	NumGPUBlocks         *int    `json:"num_gpu_blocks"`
	GPUKVCacheTokens     *int    `json:"gpu_kv_cache_tokens"`
}

// Workload is the recipe (shared-prefix stages) or the request trace.
type Workload struct {
	Kind         string          `json:"kind"`
	Name         string          `json:"name"`
	RecipeStatus string          `json:"recipe_status"`
	Simulatable  bool            `json:"simulatable"`
	SharedPrefix *SharedPrefixes `json:"shared_prefix"`
	IgnoreEOS    bool            `json:"ignore_eos"`
	Stages       []WorkloadStage `json:"stages"`
	RequestsFile string          `json:"requests_file"`
	NumRequests  int             `json:"num_requests"`
	PrefixBlocks *PrefixBlocks   `json:"prefix_blocks"`
}

// SharedPrefixes is inference-perf's shared-prefix data generator setting.
type SharedPrefixes struct {
	NumGroups       int `json:"num_groups"`
	PromptsPerGroup int `json:"prompts_per_group"`
	SystemPromptLen int `json:"system_prompt_len"`
	QuestionLen     int `json:"question_len"`
	OutputLen       int `json:"output_len"`
}

// Prompts is how many distinct prompts the recipe generates.
func (s SharedPrefixes) Prompts() int { return s.NumGroups * s.PromptsPerGroup }

// WorkloadStage is one load stage: RateRPS for DurationS seconds.
type WorkloadStage struct {
	Index       int     `json:"index"`
	RateRPS     float64 `json:"rate_rps"`
	DurationS   float64 `json:"duration_s"`
	NumRequests int     `json:"num_requests"`
}

// PrefixBlocks says how a trace's prefix_block_ids were cut.
type PrefixBlocks struct {
	BlockSizeTokens int `json:"block_size_tokens"`
}

// Measured holds the measured statistics, per stage and pooled.
type Measured struct {
	Stages  []MeasuredStage `json:"stages"`
	Summary *MeasuredStage  `json:"summary"`
}

// MeasuredStage is one stage's (or the summary's) statistics. Window, for
// per-request sets, says which requests they cover.
type MeasuredStage struct {
	Index      int      `json:"index"`
	Window     string   `json:"window"`
	Completed  *int     `json:"completed"`
	Failed     *int     `json:"failed"`
	TTFT       Dist     `json:"ttft_ms"`
	E2E        Dist     `json:"e2e_ms"`
	TPOTTrueMs *float64 `json:"tpot_true_ms"`
}

// Dist is a latency distribution in milliseconds; absent figures are nil.
type Dist struct {
	Mean *float64 `json:"mean"`
	P50  *float64 `json:"p50"`
	P90  *float64 `json:"p90"`
	P99  *float64 `json:"p99"`
}

// Baseline is another simulator's prediction for the experiment.
type Baseline struct {
	Simulator string          `json:"simulator"`
	Stages    []BaselineStage `json:"stages"`
	Summary   *BaselineStage  `json:"summary"`
}

// BaselineStage is a baseline's figures for one stage; ITLMeanMs is its own
// per-token time, comparable with tpot_true_ms.
type BaselineStage struct {
	Index     int      `json:"index"`
	TTFT      Dist     `json:"ttft_ms"`
	E2E       Dist     `json:"e2e_ms"`
	ITLMeanMs *float64 `json:"itl_ms_mean"`
}

// Load reads the experiment folder dir: experiment.json, and requests.jsonl
// when the workload is a request trace. Errors name the file and the field.
func Load(dir string) (*Experiment, error) {
	path := filepath.Join(dir, ExperimentFile)
	data, err := readCapped(path, maxExperiment)
	if err != nil {
		return nil, err
	}
	exp, err := ParseExperiment(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	exp.Dir = dir
	if exp.Workload.Kind == RequestTrace && exp.Workload.Simulatable {
		name := exp.Workload.RequestsFile
		if name == "" {
			name = RequestsFile
		}
		if name != filepath.Base(name) {
			return nil, fmt.Errorf("%s: %w: workload.requests_file %q must be a file name in the experiment folder", path, ErrInvalid, name)
		}
		reqs, err := LoadRequests(filepath.Join(dir, name), exp.traceBlockSize())
		if err != nil {
			return nil, err
		}
		exp.Requests = reqs
	}
	return exp, nil
}

// traceBlockSize is the block size the trace's prefix_block_ids were cut with.
func (e *Experiment) traceBlockSize() int {
	if e.Workload.PrefixBlocks != nil && e.Workload.PrefixBlocks.BlockSizeTokens > 0 {
		return e.Workload.PrefixBlocks.BlockSizeTokens
	}
	return e.Engine.BlockSize
}

func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w: larger than %d bytes", path, ErrInvalid, limit)
	}
	return data, nil
}

// ParseExperiment decodes and checks one experiment.json.
func ParseExperiment(data []byte) (*Experiment, error) {
	var exp Experiment
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&exp); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, describeJSONError(err))
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrInvalid)
	}
	if err := exp.check(); err != nil {
		return nil, err
	}
	return &exp, nil
}

func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("%s: %s is not a valid %s", te.Field, te.Value, te.Type)
	}
	return err.Error()
}

// checker records the first problem, with its field path.
type checker struct{ err error }

func (c *checker) fail(field, format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
	}
}

func (c *checker) intIn(field string, v, lo, hi int) {
	if v < lo || v > hi {
		c.fail(field, "%d is outside %d..%d", v, lo, hi)
	}
}

func (c *checker) positive(field string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		c.fail(field, "%v is not a positive number", v)
	}
}

func (c *checker) nonNegative(field string, v *float64) {
	if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0) {
		c.fail(field, "%v is not a non-negative number", *v)
	}
}

func (e *Experiment) check() error {
	c := &checker{}
	if e.Schema != Schema {
		c.fail("schema", "%q, want %q", e.Schema, Schema)
	}
	if e.ID == "" || len(e.ID) > 200 || strings.ContainsAny(e.ID, `/\`) {
		c.fail("id", "%q must be 1..200 characters without slashes", e.ID)
	}
	e.checkEngine(c)
	e.checkWorkload(c)
	for i, s := range e.Measured.Stages {
		checkMeasured(c, fmt.Sprintf("measured.stages[%d]", i), s)
	}
	if e.Measured.Summary != nil {
		checkMeasured(c, "measured.summary", *e.Measured.Summary)
	}
	for name, b := range e.Baselines {
		for i, s := range b.Stages {
			checkBaseline(c, fmt.Sprintf("baselines.%s.stages[%d]", name, i), s)
		}
		if b.Summary != nil {
			checkBaseline(c, fmt.Sprintf("baselines.%s.summary", name), *b.Summary)
		}
	}
	return c.err
}

func (e *Experiment) checkEngine(c *checker) {
	g := e.Engine
	c.intIn("engine.tp", g.TP, 1, maxParallel)
	c.intIn("engine.dp", g.DP, 1, maxParallel)
	c.intIn("engine.block_size", g.BlockSize, 1, maxBlockSize)
	c.intIn("engine.max_num_batched_tokens", g.MaxNumBatchedTokens, 1, maxLen)
	c.intIn("engine.max_num_seqs", g.MaxNumSeqs, 1, maxLen)
	if g.MaxModelLen != nil {
		c.intIn("engine.max_model_len", *g.MaxModelLen, 1, 1<<24)
	}
	if g.NumGPUBlocks != nil {
		c.intIn("engine.num_gpu_blocks", *g.NumGPUBlocks, 1, 1<<26)
	}
	if u := g.GPUMemoryUtilization; !(u > 0 && u <= 1) {
		c.fail("engine.gpu_memory_utilization", "%v is outside (0, 1]", u)
	}
	h := e.Hardware
	c.nonNegative("hardware.memory_gb", h.MemoryGB)
	c.nonNegative("hardware.hbm_bandwidth_tbps", h.HBMBandwidthTBps)
	c.nonNegative("hardware.peak_bf16_tflops_dense", h.PeakBF16TFLOPS)
	c.nonNegative("hardware.peak_fp8_tflops_dense", h.PeakFP8TFLOPS)
	m := e.Model
	c.nonNegative("model.params_total", &m.ParamsTotal)
	c.nonNegative("model.weight_bytes_per_param", &m.WeightBytesPerParam)
	c.nonNegative("model.kv_cache_bytes_per_token", &m.KVCacheBytesPerToken)
}

func (e *Experiment) checkWorkload(c *checker) {
	w := e.Workload
	switch w.Kind {
	case SharedPrefix:
		if !w.Simulatable {
			return // the recipe is partial; nothing below is promised
		}
		if w.SharedPrefix == nil {
			c.fail("workload.shared_prefix", "missing")
			return
		}
		sp := *w.SharedPrefix
		c.intIn("workload.shared_prefix.num_groups", sp.NumGroups, 1, maxPrompts)
		c.intIn("workload.shared_prefix.prompts_per_group", sp.PromptsPerGroup, 1, maxPrompts)
		if c.err == nil && sp.Prompts() > maxPrompts {
			c.fail("workload.shared_prefix", "%d prompts, at most %d", sp.Prompts(), maxPrompts)
		}
		c.intIn("workload.shared_prefix.system_prompt_len", sp.SystemPromptLen, 0, maxLen)
		c.intIn("workload.shared_prefix.question_len", sp.QuestionLen, 0, maxLen)
		c.intIn("workload.shared_prefix.output_len", sp.OutputLen, 1, maxLen)
		if sp.SystemPromptLen+sp.QuestionLen == 0 {
			c.fail("workload.shared_prefix", "prompts are empty")
		}
		e.checkStages(c)
	case RequestTrace:
		if w.PrefixBlocks != nil {
			c.intIn("workload.prefix_blocks.block_size_tokens", w.PrefixBlocks.BlockSizeTokens, 1, maxBlockSize)
		}
	default:
		c.fail("workload.kind", "%q, want %q or %q", w.Kind, SharedPrefix, RequestTrace)
	}
}

func (e *Experiment) checkStages(c *checker) {
	stages := e.Workload.Stages
	c.intIn("workload.stages (count)", len(stages), 1, maxStages)
	total := 0
	for i, s := range stages {
		f := fmt.Sprintf("workload.stages[%d]", i)
		c.positive(f+".rate_rps", s.RateRPS)
		c.positive(f+".duration_s", s.DurationS)
		c.intIn(f+".num_requests", s.NumRequests, 1, maxStageReqs)
		total += min(s.NumRequests, maxStageReqs)
	}
	if total > maxStageReqs {
		c.fail("workload.stages", "%d requests in all, at most %d", total, maxStageReqs)
	}
}

func checkDist(c *checker, field string, d Dist) {
	c.nonNegative(field+".mean", d.Mean)
	c.nonNegative(field+".p50", d.P50)
	c.nonNegative(field+".p90", d.P90)
	c.nonNegative(field+".p99", d.P99)
}

func checkMeasured(c *checker, field string, s MeasuredStage) {
	checkDist(c, field+".ttft_ms", s.TTFT)
	checkDist(c, field+".e2e_ms", s.E2E)
	c.nonNegative(field+".tpot_true_ms", s.TPOTTrueMs)
}

func checkBaseline(c *checker, field string, s BaselineStage) {
	checkDist(c, field+".ttft_ms", s.TTFT)
	checkDist(c, field+".e2e_ms", s.E2E)
	c.nonNegative(field+".itl_ms_mean", s.ITLMeanMs)
}

// Expand turns command-line paths into experiment folders: a folder holding
// an experiment.json is one experiment; any other folder stands for its
// sub-folders that hold one, in name order.
func Expand(paths []string) ([]string, error) {
	var dirs []string
	for _, p := range paths {
		if isFile(filepath.Join(p, ExperimentFile)) {
			dirs = append(dirs, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		found := 0
		for _, e := range entries { // ReadDir sorts by name
			sub := filepath.Join(p, e.Name())
			if e.IsDir() && isFile(filepath.Join(sub, ExperimentFile)) {
				dirs = append(dirs, sub)
				found++
			}
		}
		if found == 0 {
			return nil, fmt.Errorf("%s: no %s in it or in its sub-folders", p, ExperimentFile)
		}
	}
	return dirs, nil
}

func isFile(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular()
}
