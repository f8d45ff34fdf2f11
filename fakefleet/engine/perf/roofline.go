package perf

import (
	"math"
	"math/bits"
	"time"

	"switchyard/fakefleet/engine"
)

// Coefficients are the step-time model's fitted numbers: how much of the
// datasheet the engine reaches, and the costs the datasheet does not show.
type Coefficients struct {
	// MatmulEfficiency is the share of peak tensor FLOPs the linear
	// layers reach; AttentionEfficiency the same for attention.
	MatmulEfficiency    float64 `json:"matmul_efficiency"`
	AttentionEfficiency float64 `json:"attention_efficiency"`
	// BandwidthEfficiency is the share of peak memory bandwidth reached
	// reading weights (skinny GEMMs, one pass over every matrix).
	BandwidthEfficiency float64 `json:"bandwidth_efficiency"`
	// KVBandwidthEfficiency is the same share for the attention kernels
	// reading and writing the KV cache. It is separate because the two
	// streams reach different shares: a decode batch's weight read is a
	// fixed cost, its KV read grows with every sequence and context, so
	// one shared figure prices large decode batches of a model with a big
	// KV (no grouped-query attention) too high. 0 means "the same as
	// BandwidthEfficiency", which keeps profiles written before it.
	KVBandwidthEfficiency float64 `json:"kv_bandwidth_efficiency,omitempty"`
	// StepOverheadUs is paid once per step (scheduling, kernel launches,
	// synchronisation), SeqOverheadUs once per sequence in it (input
	// preparation, sampling, output processing).
	StepOverheadUs float64 `json:"step_overhead_us"`
	SeqOverheadUs  float64 `json:"seq_overhead_us"`
	// AllReduceUs is the fixed latency of one tensor-parallel all-reduce;
	// a layer has two. Unused at TP 1.
	AllReduceUs float64 `json:"allreduce_us"`
	// AllReduceStepUs is the latency of one step of a ring all-reduce,
	// which takes 2·(tp−1) of them, so that the latency grows with the TP
	// size: a fixed figure fitted across TP sizes prices TP2 too high and
	// TP4 and TP8 too low. It adds to AllReduceUs; 0 (absent) keeps
	// profiles written before it pricing as they did.
	AllReduceStepUs float64 `json:"allreduce_step_us,omitempty"`
	// AllReduceDoublingUs is the latency of one round of an all-reduce that
	// halves (or doubles) the group each round, as over NVSwitch: ⌈log2 tp⌉
	// rounds, so TP2 pays one, TP4 two and TP8 three. It adds to
	// AllReduceUs and AllReduceStepUs; 0 (absent) keeps profiles written
	// before it pricing as they did.
	AllReduceDoublingUs float64 `json:"allreduce_doubling_us,omitempty"`
	// PCIeCollectiveUs is the fixed latency of one collective between GPUs
	// joined by PCIe rather than NVLink: a tensor-parallel all-reduce, or
	// one of the two all-to-alls (dispatch and combine) an expert-parallel
	// group runs per MoE layer. Collectives over PCIe cost several times
	// those over NVLink, so one latency for both links prices PCIe
	// deployments far too fast. 0 (absent) keeps profiles written before
	// it pricing as they did: PCIe all-reduces at AllReduceUs and
	// expert-parallel all-to-alls not priced.
	PCIeCollectiveUs float64 `json:"pcie_collective_us,omitempty"`
	// PCIeHopUs prices collectives over PCIe per hop instead: a ring
	// all-reduce over tp GPUs synchronises 2·(tp−1) times (reduce-scatter,
	// then all-gather), an all-to-all over ep GPUs ep−1 times. One figure
	// per collective cannot serve both: the calibration set's TP2
	// all-reduces over PCIe ask about 175 µs each, its expert-parallel
	// all-to-alls about 100, which one hop of about 90 µs explains. When
	// set it replaces PCIeCollectiveUs.
	PCIeHopUs float64 `json:"pcie_hop_us,omitempty"`
	// SamplingNsPerLogit is the sampler's time per vocabulary entry of
	// every sequence in a step, in nanoseconds. After the LM head vLLM
	// turns each sequence's logits (one per vocabulary entry, gathered
	// whole on every GPU of the TP group) into a token: conversion to
	// 32-bit, temperature, top-k/top-p where asked for (a sort over the
	// vocabulary in the plain PyTorch path) and the draw. That work runs
	// after the forward pass and grows with the vocabulary, so a
	// 152k-entry Qwen pays about five times what a 32k-entry Llama 2 does
	// per sequence and a 202k-entry Llama 4 six, which a per-sequence
	// overhead alone cannot express. 0 (absent) keeps
	// profiles written before it pricing as they did.
	SamplingNsPerLogit float64 `json:"sampling_ns_per_logit,omitempty"`
}

// allReduceLatency is the latency of one all-reduce over tp GPUs in
// seconds, before its bytes: the fixed part, 2·(tp−1) ring steps and
// ⌈log2 tp⌉ halving rounds.
func (c Coefficients) allReduceLatency(tp int) float64 {
	rounds := float64(bits.Len(uint(max(tp, 1) - 1)))
	return (c.AllReduceUs + 2*float64(tp-1)*c.AllReduceStepUs + rounds*c.AllReduceDoublingUs) * 1e-6
}

// DefaultCoefficients are generic starting values, not fitted on any
// measurement: typical shares of peak for a well-tuned engine and
// overheads of the order vLLM's scheduler and CUDA graphs show.
//
// The KV share is higher than the weights': attention kernels stream the
// KV cache in long contiguous reads and reach about 0.9 of the datasheet
// bandwidth (what a streaming copy reaches on HBM), where a weight read is
// many matrices of every size. An all-reduce costs 10 µs per halving of
// the group, a PCIe hop 50 µs.
var DefaultCoefficients = Coefficients{
	MatmulEfficiency: 0.6, AttentionEfficiency: 0.4, BandwidthEfficiency: 0.8,
	KVBandwidthEfficiency: 0.9, StepOverheadUs: 500, SeqOverheadUs: 10, AllReduceDoublingUs: 10,
	PCIeHopUs: 50,
}

// GenericPCIeCollectiveUs is where a fit of pcie_collective_us starts when
// the profile leaves it unset.
const GenericPCIeCollectiveUs = 50

// GenericSamplingNsPerLogit is where a fit of sampling_ns_per_logit starts
// when the profile leaves it unset. It is not in DefaultCoefficients, so
// the generic profile and fits that do not name it price as they did
// before the term existed.
const GenericSamplingNsPerLogit = 0.1

// pcieCollective is the latency in seconds of one collective of hops
// ring steps over PCIe, and whether PCIe collectives are priced at all.
func (c Coefficients) pcieCollective(hops int) (float64, bool) {
	switch {
	case c.PCIeHopUs > 0:
		return c.PCIeHopUs * float64(hops) * 1e-6, true
	case c.PCIeCollectiveUs > 0:
		return c.PCIeCollectiveUs * 1e-6, true
	}
	return 0, false
}

// kvBandwidthEfficiency is KVBandwidthEfficiency, or BandwidthEfficiency
// where it is unset.
func (c Coefficients) kvBandwidthEfficiency() float64 {
	if c.KVBandwidthEfficiency == 0 {
		return c.BandwidthEfficiency
	}
	return c.KVBandwidthEfficiency
}

// Roofline is the physical step-time model: a step takes the longer of its
// compute time and its memory time, plus tensor-parallel communication
// and fixed overheads. It implements engine.Timing for one data-parallel
// rank of TP GPUs. Build it with Profile.Timing; the zero value is unusable.
type Roofline struct {
	linearFlops, attnFlops float64 // FLOP/s of the TP group, efficiency applied
	memBandwidth           float64 // B/s of one GPU reading weights, efficiency applied
	kvBandwidth            float64 // B/s of one GPU moving KV, efficiency applied
	bodyActiveParams       float64 // per-token weights outside embedding and LM head
	lmHeadParams           float64 // run once per sequence in the step
	attnFlopsPerPair       float64 // 4·layers·heads·head_dim per (query, key) pair
	denseBytesPerGPU       float64 // weights read every step, on one GPU
	expertBytesPerGPU      float64 // one routed expert in every expert layer, on one GPU
	experts, expertsPerTok float64
	kvBytesPerTokenPerGPU  float64
	allReduces             float64 // per step: 2 per layer, 0 at TP 1
	allReduceFixed         float64 // seconds per all-reduce
	allReduceBytesPerTok   float64 // seconds per step token per all-reduce
	allToAlls              float64 // per step: 2 per MoE layer with expert parallelism over PCIe
	allToAllFixed          float64 // seconds per all-to-all
	allToAllBytesPerTok    float64 // seconds per step token per all-to-all
	stepOverhead           float64 // seconds
	seqOverhead            float64 // seconds, plus samplingPerSeq
	samplingPerSeq         float64 // seconds: the sampler over one sequence's logits
}

func newRoofline(m ModelSpec, g GPUSpec, tp, ep int, c Coefficients) *Roofline {
	peak := g.PeakBF16TFlopsDense * 1e12
	if m.WeightBytesPerParam <= 1 && g.PeakFP8TFlopsDense > 0 {
		peak = g.PeakFP8TFlopsDense * 1e12 // 8-bit weights run on the FP8 tensor cores
	}
	group := float64(tp)
	r := &Roofline{
		linearFlops:      peak * c.MatmulEfficiency * group,
		attnFlops:        g.PeakBF16TFlopsDense * 1e12 * c.AttentionEfficiency * group,
		memBandwidth:     g.HBMBandwidthTBps * 1e12 * c.BandwidthEfficiency,
		kvBandwidth:      g.HBMBandwidthTBps * 1e12 * c.kvBandwidthEfficiency(),
		bodyActiveParams: max(0, m.ParamsActivePerToken-m.embeddingParams()-m.lmHeadParams()),
		lmHeadParams:     m.lmHeadParams(),
		attnFlopsPerPair: 4 * float64(m.NumLayers) * float64(m.NumAttentionHeads) * float64(m.HeadDim),
		denseBytesPerGPU: (m.ParamsTotal - m.embeddingParams() - m.routedExpertParams()) * m.WeightBytesPerParam / group,
		stepOverhead:     c.StepOverheadUs * 1e-6,
		seqOverhead:      c.SeqOverheadUs * 1e-6,
		samplingPerSeq:   c.SamplingNsPerLogit * 1e-9 * float64(m.VocabSize),
	}
	if m.MoE != nil {
		r.expertBytesPerGPU = float64(m.moeLayers()) * m.expertParams() * m.WeightBytesPerParam / (group * float64(ep))
		r.experts, r.expertsPerTok = float64(m.MoE.NumExperts), float64(m.MoE.ExpertsPerToken)
	}
	// KV heads are split over the TP group, and replicated when there are
	// fewer heads than GPUs.
	r.kvBytesPerTokenPerGPU = m.KVCacheBytesPerToken / float64(min(tp, m.NumKeyValueHeads))
	if tp > 1 {
		r.allReduces = 2 * float64(m.NumLayers)
		r.allReduceFixed = c.allReduceLatency(tp)
		// A ring all-reduce sends 2(n−1)/n of the 16-bit activations.
		r.allReduceBytesPerTok = 2 * (group - 1) / group * float64(m.HiddenSize) * 2 / g.linkBandwidth()
		if lat, ok := c.pcieCollective(2 * (tp - 1)); ok && g.onPCIe() {
			r.allReduceFixed = lat
		}
	}
	r.priceExpertAllToAll(m, g, ep, c)
	return r
}

// priceExpertAllToAll sets the all-to-alls of expert parallelism over
// PCIe: per MoE layer one dispatches every token's 16-bit activations to
// its k experts and one combines the results, the share (ep−1)/ep of them
// crossing to another GPU. They are priced only with PCIeHopUs or
// PCIeCollectiveUs set (see Coefficients); over NVLink they are not priced.
func (r *Roofline) priceExpertAllToAll(m ModelSpec, g GPUSpec, ep int, c Coefficients) {
	lat, ok := c.pcieCollective(ep - 1)
	if ep <= 1 || m.MoE == nil || !g.onPCIe() || !ok {
		return
	}
	n := float64(ep)
	r.allToAlls = 2 * float64(m.moeLayers())
	r.allToAllFixed = lat
	r.allToAllBytesPerTok = float64(m.MoE.ExpertsPerToken) * (n - 1) / n * float64(m.HiddenSize) * 2 / g.linkBandwidth()
}

// StepTime prices one step of the rank.
func (r *Roofline) StepTime(s engine.Step) time.Duration {
	tokens := s.PrefillTokens + len(s.Decode)
	if tokens == 0 {
		return 0
	}
	seqs := float64(len(s.Prefill) + len(s.Decode))
	// Attention pairs: a chunk of t new tokens over c cached ones is
	// t·(c + t/2) causal pairs; a decode token sees its context and itself.
	// KV traffic: every cached token is read, every new one written.
	pairs := float64(s.DecodeContext + len(s.Decode))
	kvTokens := pairs
	for _, c := range s.Prefill {
		t, ctx := float64(c.NewTokens), float64(c.Context)
		pairs += t * (ctx + t/2)
		kvTokens += ctx + t
	}
	t := float64(tokens)
	compute := (2*r.bodyActiveParams*t+2*r.lmHeadParams*seqs)/r.linearFlops + r.attnFlopsPerPair*pairs/r.attnFlops
	memory := r.weightBytes(t)/r.memBandwidth + kvTokens*r.kvBytesPerTokenPerGPU/r.kvBandwidth
	comm := r.allReduces*(r.allReduceFixed+r.allReduceBytesPerTok*t) + r.allToAlls*(r.allToAllFixed+r.allToAllBytesPerTok*t)
	sec := max(compute, memory) + comm + r.stepOverhead + (r.seqOverhead+r.samplingPerSeq)*seqs
	// A profile's numbers are user input: never let them overflow.
	if !(sec < maxStepSeconds) {
		sec = maxStepSeconds
	}
	return time.Duration(sec * float64(time.Second))
}

// maxStepSeconds bounds one step, far beyond any real one.
const maxStepSeconds = 1e6

// weightBytes is what one GPU reads of the weights in a step of t tokens:
// all dense weights, and of the routed experts only those some token
// picked — with uniform routing, E·(1 − (1 − k/E)^t) per layer.
func (r *Roofline) weightBytes(t float64) float64 {
	if r.experts == 0 {
		return r.denseBytesPerGPU
	}
	touched := r.experts * (1 - math.Pow(1-r.expertsPerTok/r.experts, t))
	return r.denseBytesPerGPU + touched*r.expertBytesPerGPU
}
