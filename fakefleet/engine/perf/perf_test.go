package perf

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"switchyard/fakefleet/engine"
)

// The specs below are synthetic round numbers, chosen so expected times
// can be worked out by hand.
func denseModel() ModelSpec {
	return ModelSpec{HFName: "test/dense-8b", NumLayers: 32, HiddenSize: 4096, IntermediateSize: 14336,
		NumAttentionHeads: 32, NumKeyValueHeads: 8, HeadDim: 128, VocabSize: 100_000,
		ParamsTotal: 8e9, ParamsActivePerToken: 8e9, WeightBytesPerParam: 2, KVCacheBytesPerToken: 131072}
}

func moeModel() ModelSpec {
	m := denseModel()
	m.HFName = "test/moe"
	m.MoE = &MoESpec{NumExperts: 8, ExpertsPerToken: 2, ExpertIntermediateSize: 8192, MoELayers: "all"}
	// 32 layers × 8 experts × 3·4096·8192 = 25.8 G routed params.
	m.ParamsTotal = 28e9
	m.ParamsActivePerToken = 28e9 - 6*32*3*4096*8192
	return m
}

func testGPU() GPUSpec {
	return GPUSpec{GPU: "test GPU", MemoryGB: 80, HBMBandwidthTBps: 2, PeakBF16TFlopsDense: 1000, PeakFP8TFlopsDense: 2000,
		Interconnect: "NVLink 4"}
}

// unit coefficients make the roofline terms readable: efficiency 1, no
// overheads.
var unit = Coefficients{MatmulEfficiency: 1, AttentionEfficiency: 1, BandwidthEfficiency: 1}

// legacy are the generic coefficients of profiles written before the
// halving rounds and the PCIe hop: the "prices as before" tests hold
// such profiles to their old prices.
var legacy = Coefficients{MatmulEfficiency: 0.6, AttentionEfficiency: 0.4, BandwidthEfficiency: 0.8,
	KVBandwidthEfficiency: 0.8, StepOverheadUs: 500, SeqOverheadUs: 10, AllReduceUs: 10, PCIeCollectiveUs: 50}

func testProfile() Profile {
	return Profile{Name: "t", Model: denseModel(), GPU: testGPU(), Coefficients: legacy}.WithDefaults()
}

func decode(contexts ...int) engine.Step {
	s := engine.Step{Decode: contexts}
	for _, c := range contexts {
		s.DecodeContext += c
	}
	return s
}

func prefill(chunks ...engine.Chunk) engine.Step {
	s := engine.Step{Prefill: chunks}
	for _, c := range chunks {
		s.PrefillTokens += c.NewTokens
	}
	return s
}

func near(t *testing.T, what string, got time.Duration, wantSec float64) {
	t.Helper()
	if w := time.Duration(wantSec * float64(time.Second)); math.Abs(float64(got-w)) > float64(w)/1000+1 {
		t.Fatalf("%s = %v, want %v", what, got, w)
	}
}

func TestDecodeIsWeightAndKVReads(t *testing.T) {
	r := newRoofline(denseModel(), testGPU(), 1, 1, unit)
	// Weights read: 8e9 − 0.4096e9 embedding = 7.5904e9 params × 2 B at
	// 2 TB/s; KV: 1001 tokens × 128 KiB.
	want := (7.5904e9*2 + 1001*131072) / 2e12
	near(t, "decode, batch 1", r.StepTime(decode(1000)), want)
	// The KV fraction of the pool has nothing to do with the time.
	s := decode(1000)
	s.KVFraction = 0.9
	near(t, "decode, 90 % of the pool referenced", r.StepTime(s), want)
	if r.StepTime(decode(1000, 1000)) <= r.StepTime(decode(1000)) || r.StepTime(decode(4000)) <= r.StepTime(decode(1000)) {
		t.Fatal("more sequences or longer context must cost more")
	}
}

func TestPrefillIsComputeAndPaysForCachedContext(t *testing.T) {
	r := newRoofline(denseModel(), testGPU(), 1, 1, unit)
	// 2048 new tokens: linear 2·(8e9 − 2·0.4096e9)·2048 + LM head
	// 2·0.4096e9·1; attention 4·32·32·128·2048·1024 pairs; at 1 PFLOP/s.
	body := 8e9 - 2*0.4096e9
	linear := 2*body*2048 + 2*0.4096e9
	attn := 4.0 * 32 * 32 * 128 * 2048 * 1024
	near(t, "prefill 2048", r.StepTime(prefill(engine.Chunk{NewTokens: 2048})), (linear+attn)/1e15)
	// The same chunk after 6000 cached tokens attends to them too.
	attn = 4.0 * 32 * 32 * 128 * 2048 * (6000 + 1024)
	near(t, "prefill 2048 over 6000 cached", r.StepTime(prefill(engine.Chunk{NewTokens: 2048, Context: 6000})), (linear+attn)/1e15)
}

func TestOverheadsAndEfficiencies(t *testing.T) {
	c := Coefficients{MatmulEfficiency: 0.5, AttentionEfficiency: 0.5, BandwidthEfficiency: 0.5, StepOverheadUs: 300, SeqOverheadUs: 20}
	r := newRoofline(denseModel(), testGPU(), 1, 1, c)
	want := (7.5904e9*2+2*101*131072)/1e12 + 300e-6 + 2*20e-6
	near(t, "decode of 2 at half efficiency", r.StepTime(decode(100, 100)), want)
	if r.StepTime(engine.Step{}) != 0 {
		t.Fatal("an empty step takes no time")
	}
}

// TestKVTrafficHasItsOwnBandwidthShare: the KV cache moves at its own
// share of peak, so a large decode batch of long contexts is priced by it
// and the weights by theirs.
func TestKVTrafficHasItsOwnBandwidthShare(t *testing.T) {
	c := unit
	c.KVBandwidthEfficiency = 0.5
	r := newRoofline(denseModel(), testGPU(), 1, 1, c)
	ctx := make([]int, 128)
	for i := range ctx {
		ctx[i] = 700
	}
	// Weights at 2 TB/s, 128 × 701 KV tokens of 128 KiB at 1 TB/s.
	near(t, "decode of 128 at half KV bandwidth", r.StepTime(decode(ctx...)), 7.5904e9*2/2e12+128*701*131072/1e12)
}

// TestUnsetKVBandwidthShareIsTheWeights: profiles written before the KV
// share existed price steps exactly as they did.
func TestUnsetKVBandwidthShareIsTheWeights(t *testing.T) {
	c := Coefficients{MatmulEfficiency: 0.5, AttentionEfficiency: 0.5, BandwidthEfficiency: 0.7, StepOverheadUs: 300, SeqOverheadUs: 20}
	explicit := c
	explicit.KVBandwidthEfficiency = 0.7
	s := decode(100, 2000, 4000)
	if a, b := newRoofline(denseModel(), testGPU(), 1, 1, c).StepTime(s), newRoofline(denseModel(), testGPU(), 1, 1, explicit).StepTime(s); a != b {
		t.Fatalf("unset KV share %v, explicit equal share %v", a, b)
	}
	near(t, "decode at 0.7 of 2 TB/s", newRoofline(denseModel(), testGPU(), 1, 1, c).StepTime(s),
		(7.5904e9*2+6103*131072)/1.4e12+300e-6+3*20e-6)
}

// TestSamplingGrowsWithVocabularyAndSequences: the sampler's time is paid
// once per sequence in the step, in proportion to the vocabulary, on top of
// the roofline (it runs after the forward pass), and it is not split over
// a TP group.
func TestSamplingGrowsWithVocabularyAndSequences(t *testing.T) {
	c := unit
	c.SamplingNsPerLogit = 0.25
	m := denseModel()
	s := decode(100, 100, 100)
	with := newRoofline(m, testGPU(), 1, 1, c).StepTime(s)
	without := newRoofline(m, testGPU(), 1, 1, unit).StepTime(s)
	// 3 sequences × 100,000 logits × 0.25 ns.
	near(t, "sampling of 3 sequences", with-without, 3*100_000*0.25e-9)
	// Four times the vocabulary, four times the sampling; the weights read
	// (the LM head is in the dense weights) move too, so compare the
	// differences.
	big := m
	big.VocabSize *= 4
	bigWith := newRoofline(big, testGPU(), 1, 1, c).StepTime(s)
	bigWithout := newRoofline(big, testGPU(), 1, 1, unit).StepTime(s)
	near(t, "sampling over 400k logits", bigWith-bigWithout, 3*400_000*0.25e-9)
	// A prefill chunk is a sequence of the step too.
	mixed := s
	mixed.Prefill = []engine.Chunk{{NewTokens: 16}}
	mixed.PrefillTokens = 16
	d := newRoofline(m, testGPU(), 1, 1, c).StepTime(mixed) - newRoofline(m, testGPU(), 1, 1, unit).StepTime(mixed)
	near(t, "sampling of 3 decodes and a chunk", d, 4*100_000*0.25e-9)
	// TP2 halves the weights and adds all-reduces, but not the sampler.
	d = newRoofline(m, testGPU(), 2, 1, c).StepTime(s) - newRoofline(m, testGPU(), 2, 1, unit).StepTime(s)
	near(t, "sampling at TP2", d, 3*100_000*0.25e-9)
}

// TestProfileWithoutSamplingPricesAsBefore: a profile that does not name
// the sampler's time writes no such field and prices no sampling.
func TestProfileWithoutSamplingPricesAsBefore(t *testing.T) {
	p := testProfile()
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "sampling_ns_per_logit") {
		t.Fatalf("an unset sampling time is written out:\n%s", data)
	}
	back, err := ParseProfile(data)
	if err != nil {
		t.Fatal(err)
	}
	c := back.Coefficients
	s := decode(100, 2000)
	want := (7.5904e9*2+2102*131072)/(2e12*c.BandwidthEfficiency) + c.StepOverheadUs*1e-6 + 2*c.SeqOverheadUs*1e-6
	near(t, "decode without sampling", back.Timing().StepTime(s), want)
	p.Coefficients.SamplingNsPerLogit = 0.2
	if data, err = p.Marshal(); err != nil || !strings.Contains(string(data), `"sampling_ns_per_logit": 0.2`) {
		t.Fatalf("a set sampling time is not written out (%v):\n%s", err, data)
	}
	if back, err = ParseProfile(data); err != nil {
		t.Fatal(err)
	}
	near(t, "decode with sampling", back.Timing().StepTime(s), want+2*100_000*0.2e-9)
}

func TestTensorParallelSplitsWorkAndAddsAllReduces(t *testing.T) {
	c := unit
	c.AllReduceUs = 5
	r1 := newRoofline(denseModel(), testGPU(), 1, 1, c)
	r2 := newRoofline(denseModel(), testGPU(), 2, 1, c)
	one, two := r1.StepTime(decode(1000)), r2.StepTime(decode(1000))
	// Half the reads, plus 64 all-reduces of 5 µs and 1 token's 8 KiB
	// activations (half of it sent) at 450 GB/s.
	comm := 64 * (5e-6 + 4096*2/450e9)
	near(t, "TP2 decode", two, one.Seconds()/2+comm)
}

func TestRingAllReduceLatencyGrowsWithTPSize(t *testing.T) {
	c := unit
	c.AllReduceUs, c.AllReduceStepUs = 1, 2
	for _, tp := range []int{2, 4, 8} {
		r := newRoofline(denseModel(), testGPU(), tp, 1, c)
		n := float64(tp)
		// 64 all-reduces, each 1 µs fixed, 2·(tp−1) ring steps of 2 µs
		// and 2·(tp−1)/tp of one token's 8 KiB activations at 450 GB/s.
		comm := 64 * (1e-6 + 2*(n-1)*2e-6 + 2*(n-1)/n*4096*2/450e9)
		near(t, fmt.Sprintf("TP%d decode", tp), r.StepTime(decode(1000)), 7.5904e9*2/n/2e12+1001*131072/n/2e12+comm)
	}
}

func TestHalvingRoundsGrowWithTheLogOfTheTPSize(t *testing.T) {
	c := unit
	c.AllReduceUs, c.AllReduceDoublingUs = 1, 3
	for tp, rounds := range map[int]float64{2: 1, 3: 2, 4: 2, 8: 3} {
		r := newRoofline(denseModel(), testGPU(), tp, 1, c)
		n := float64(tp)
		// 64 all-reduces, each 1 µs fixed, ⌈log2 tp⌉ rounds of 3 µs and
		// 2·(tp−1)/tp of one token's 8 KiB activations at 450 GB/s.
		comm := 64 * (1e-6 + rounds*3e-6 + 2*(n-1)/n*4096*2/450e9)
		kvShare := float64(min(tp, 8)) // the test model's 8 KV heads split over the group
		near(t, fmt.Sprintf("TP%d decode", tp), r.StepTime(decode(1000)), 7.5904e9*2/n/2e12+1001*131072/kvShare/2e12+comm)
	}
	if got := c.allReduceLatency(1); got != 1e-6 {
		t.Errorf("TP1 latency %v, want only the fixed 1 µs (no rounds)", got)
	}
}

func TestProfileWithoutRingStepPricesAsBefore(t *testing.T) {
	p := testProfile()
	p.TP = 4
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "allreduce_step_us") {
		t.Fatalf("an unset ring step is written out:\n%s", data)
	}
	back, err := ParseProfile(data)
	if err != nil {
		t.Fatal(err)
	}
	timing := back.Timing()
	// Only the fixed 10 µs per all-reduce, whatever the TP size.
	c := legacy
	s := decode(1000)
	fixedOnly := newRoofline(denseModel(), testGPU(), 4, 1, c).StepTime(s)
	c.AllReduceUs = 0
	noLatency := newRoofline(denseModel(), testGPU(), 4, 1, c).StepTime(s)
	if got := timing.StepTime(s); got != fixedOnly || got-noLatency != 64*10*time.Microsecond {
		t.Fatalf("TP4 step %v, want %v (all-reduce latency %v, want 640µs)", got, fixedOnly, got-noLatency)
	}
}

func pcieGPU() GPUSpec {
	g := testGPU()
	g.Interconnect = "PCIe Gen5 x16"
	return g
}

func TestPCIeCollectiveLatencyPricesAllReducesOverPCIe(t *testing.T) {
	c := unit
	c.AllReduceUs, c.AllReduceStepUs, c.PCIeCollectiveUs = 5, 1, 100
	two := newRoofline(denseModel(), pcieGPU(), 2, 1, c).StepTime(decode(1000))
	// 64 all-reduces at the PCIe latency alone (no ring steps on top), and
	// half of one token's 8 KiB activations at PCIe Gen5's 64 GB/s.
	comm := 64 * (100e-6 + 4096*2/64e9)
	near(t, "TP2 decode over PCIe", two, 7.5904e9*2/2/2e12+1001*131072/2/2e12+comm)
	// Over NVLink the PCIe latency plays no part.
	nvlink := newRoofline(denseModel(), testGPU(), 2, 1, c).StepTime(decode(1000))
	near(t, "TP2 decode over NVLink", nvlink, 7.5904e9*2/2/2e12+1001*131072/2/2e12+64*(7e-6+4096*2/450e9))
}

// TestPCIeHopPricesRingStepsAndAllToAllHops: with pcie_hop_us a TP all-reduce
// over PCIe costs 2·(tp−1) hops and an expert-parallel all-to-all ep−1,
// and the per-collective latency is then ignored.
func TestPCIeHopPricesRingStepsAndAllToAllHops(t *testing.T) {
	c := unit
	c.PCIeCollectiveUs, c.PCIeHopUs = 500, 40
	for _, tp := range []int{2, 4} {
		with := newRoofline(denseModel(), pcieGPU(), tp, 1, c).StepTime(decode(1000))
		off := c
		off.PCIeCollectiveUs, off.PCIeHopUs = 0, 0
		base := newRoofline(denseModel(), pcieGPU(), tp, 1, off).StepTime(decode(1000))
		// 64 all-reduces: the hops replace the NVLink-style fixed latency.
		want := 64 * (float64(2*(tp-1))*40e-6 - off.allReduceLatency(tp))
		near(t, fmt.Sprintf("TP%d hops", tp), with-base, want)
	}
	m := moeModel()
	s := decode(make([]int, 64)...)
	for _, ep := range []int{2, 4} {
		with := newRoofline(m, pcieGPU(), 1, ep, c).StepTime(s)
		c1 := c
		c1.PCIeHopUs = 0
		c1.PCIeCollectiveUs = 40 * float64(ep-1) // the same latency, per collective
		same := newRoofline(m, pcieGPU(), 1, ep, c1).StepTime(s)
		if with != same {
			t.Errorf("EP%d: %v priced per hop, %v at the same latency per all-to-all", ep, with, same)
		}
	}
	// Over NVLink the hops play no part.
	off := c
	off.PCIeHopUs, off.PCIeCollectiveUs = 0, 0
	if a, b := newRoofline(denseModel(), testGPU(), 2, 1, c).StepTime(decode(1000)), newRoofline(denseModel(), testGPU(), 2, 1, off).StepTime(decode(1000)); a != b {
		t.Errorf("TP2 over NVLink: %v with the PCIe hop, %v without", a, b)
	}
}

func TestExpertParallelAllToAllsOverPCIe(t *testing.T) {
	c := unit
	c.PCIeCollectiveUs = 100
	m := moeModel()
	s := decode(make([]int, 64)...) // 64 sequences with no context: weights only
	with := newRoofline(m, pcieGPU(), 1, 2, c).StepTime(s)
	c.PCIeCollectiveUs = 0
	without := newRoofline(m, pcieGPU(), 1, 2, c).StepTime(s)
	// 2 all-to-alls per MoE layer (32): each 100 µs and, of 64 tokens'
	// activations to 2 experts each, the half bound for the other GPU at
	// 64 GB/s.
	want := 64 * (100e-6 + 64*2*0.5*4096*2/64e9)
	near(t, "all-to-alls of an EP2 decode", with-without, want)
	// No expert parallelism, or NVLink: nothing is added.
	c.PCIeCollectiveUs = 100
	if a, b := newRoofline(m, pcieGPU(), 1, 1, c).StepTime(s), newRoofline(m, pcieGPU(), 1, 1, unit).StepTime(s); a != b {
		t.Errorf("one rank: %v with the PCIe latency, %v without", a, b)
	}
	if a, b := newRoofline(m, testGPU(), 1, 2, c).StepTime(s), newRoofline(m, testGPU(), 1, 2, unit).StepTime(s); a != b {
		t.Errorf("EP over NVLink: %v with the PCIe latency, %v without", a, b)
	}
}

func TestProfileWithoutPCIeCollectivePricesAsBefore(t *testing.T) {
	p := testProfile()
	p.Model, p.GPU, p.DP, p.ExpertParallel = moeModel(), pcieGPU(), 2, true
	p.Coefficients.PCIeCollectiveUs = 0
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "pcie_collective_us") {
		t.Fatalf("an unset PCIe latency is written out:\n%s", data)
	}
	back, err := ParseProfile(data)
	if err != nil {
		t.Fatal(err)
	}
	// One rank of an EP2 group on PCIe, no tensor parallelism: without the
	// latency nothing but the step's own compute, reads and overheads.
	s := decode(make([]int, 64)...)
	c := back.Coefficients
	c.AllReduceUs = 0
	if got, want := back.Timing().StepTime(s), newRoofline(moeModel(), pcieGPU(), 1, 2, c).StepTime(s); got != want {
		t.Fatalf("EP2 step %v, want %v (no all-to-all priced)", got, want)
	}
	p.TP, p.DP, p.ExpertParallel = 2, 1, false
	data, _ = p.Marshal()
	back, err = ParseProfile(data)
	if err != nil {
		t.Fatal(err)
	}
	// TP2 over PCIe: the all-reduces at allreduce_us (10 µs), as before.
	c.AllReduceUs = 10
	if got, want := back.Timing().StepTime(s), newRoofline(moeModel(), pcieGPU(), 2, 1, c).StepTime(s); got != want {
		t.Fatalf("TP2 step %v, want %v", got, want)
	}
	c.AllReduceUs = 0
	if got, noLatency := back.Timing().StepTime(s), newRoofline(moeModel(), pcieGPU(), 2, 1, c).StepTime(s); got-noLatency != 64*10*time.Microsecond {
		t.Fatalf("TP2 all-reduce latency %v, want 640µs", got-noLatency)
	}
}

func TestMoEReadsOnlyTouchedExperts(t *testing.T) {
	r := newRoofline(moeModel(), testGPU(), 1, 1, unit)
	expert := 32 * 3 * 4096 * 8192 * 2.0 // bytes of one expert in every layer
	dense := (28e9 - 0.4096e9 - 8*expert/2) * 2
	// One token touches 2 of 8 experts per layer.
	near(t, "MoE decode of 1", r.StepTime(decode(0)), (dense+2*expert+131072)/2e12)
	// 256 tokens touch practically all of them: 8·(1 − (3/4)^256).
	touched := 8 * (1 - math.Pow(0.75, 256))
	ctx := make([]int, 256)
	near(t, "MoE decode of 256", r.StepTime(decode(ctx...)), (dense+touched*expert+256*131072)/2e12)
}

func TestFP8WeightsUseFP8Peak(t *testing.T) {
	m := denseModel()
	m.WeightBytesPerParam = 1
	r8, r16 := newRoofline(m, testGPU(), 1, 1, unit), newRoofline(denseModel(), testGPU(), 1, 1, unit)
	p := prefill(engine.Chunk{NewTokens: 2048})
	if got, bf := r8.StepTime(p), r16.StepTime(p); got >= bf*3/4 {
		t.Fatalf("FP8 prefill %v, BF16 %v: the linear layers should run at twice the rate", got, bf)
	}
}

func TestKVBlocksFromMemory(t *testing.T) {
	p := testProfile()
	// 0.9 × 80 GiB − 8e9 × 2 B − 1.5 GiB, over 128 KiB per token, in 16s.
	want := int(math.Floor((0.9*80*gib - 16e9 - 1.5*gib) / 131072 / 16))
	if got, err := p.KVBlocks(); err != nil || got != want {
		t.Fatalf("KV blocks %d %v, want %d", got, err, want)
	}
	p.TP = 2 // half the weights and half the KV heads on each GPU
	want = int(math.Floor((0.9*80*gib - 8e9 - 1.5*gib) / 65536 / 16))
	if got, _ := p.KVBlocks(); got != want {
		t.Fatalf("TP2 KV blocks %d, want %d", got, want)
	}
	p.Engine.NumGPUBlocks = 1234
	if got, _ := p.KVBlocks(); got != 1234 {
		t.Fatalf("a logged num_gpu_blocks must win, got %d", got)
	}
	small := testProfile()
	small.GPU.MemoryGB = 16
	if _, err := small.KVBlocks(); !errors.Is(err, ErrProfile) {
		t.Fatalf("16 GiB cannot hold 16 GB of weights: %v", err)
	}
}

func TestExpertParallelSplitsExpertsOverRanks(t *testing.T) {
	p := testProfile()
	p.Model = moeModel()
	p.DP = 2
	alone, _ := p.KVBlocks()
	p.ExpertParallel = true
	split, _ := p.KVBlocks()
	if split <= alone {
		t.Fatalf("with the experts split over 2 ranks there must be more room for KV: %d vs %d", split, alone)
	}
}

func TestEngineRunsOnTheProfile(t *testing.T) {
	p := testProfile()
	p.Engine.MaxModelLen = 4096
	cfg, err := p.EngineConfig()
	if err != nil {
		t.Fatal(err)
	}
	e := engine.New(cfg)
	t0 := time.Unix(0, 0)
	e.Submit(engine.Request{ID: 1, Tokens: make([]uint32, 1000), MaxTokens: 10}, t0)
	e.Submit(engine.Request{ID: 2, Tokens: make([]uint32, 4000), MaxTokens: 100}, t0)
	var end time.Time
	var rejected, finished int
	for {
		at, ok := e.NextEvent()
		if !ok {
			break
		}
		for _, o := range e.Advance(at) {
			rejected += b2i(o.Rejected && o.Reason == engine.RejectMaxModelLen)
			finished += b2i(o.Finished && !o.Rejected)
		}
		end = at
	}
	if rejected != 1 || finished != 1 {
		t.Fatalf("rejected %d, finished %d: want the 4,100-token request refused and the other served", rejected, finished)
	}
	// One prefill of 1000 tokens (~17 ms) and 9 decodes (~8.5 ms each).
	if d := end.Sub(t0); d < 80*time.Millisecond || d > 120*time.Millisecond {
		t.Fatalf("request took %v", d)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestProfileRoundTripAndErrors(t *testing.T) {
	p := testProfile()
	p.Model.MoE = nil
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseProfile(data)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := back.Marshal()
	if string(again) != string(data) {
		t.Fatalf("round trip changed the profile:\n%s\n%s", data, again)
	}
	bad := []struct{ name, edit, want string }{
		{"unknown field", `"tp": 1`, `"tpp": 1`},
		{"efficiency above 1", `"matmul_efficiency": 0.6`, `"matmul_efficiency": 1.6`},
		{"KV efficiency above 1", `"kv_bandwidth_efficiency": 0.8`, `"kv_bandwidth_efficiency": 1.2`},
		{"negative KV efficiency", `"kv_bandwidth_efficiency": 0.8`, `"kv_bandwidth_efficiency": -0.5`},
		{"no layers", `"num_layers": 32`, `"num_layers": 0`},
		{"unknown GPU", `"hbm_bandwidth_tbps": 2`, `"hbm_bandwidth_tbps": null`},
		{"negative overhead", `"request_ms": 0`, `"request_ms": -1`},
		{"negative ring step", `"allreduce_us": 10`, `"allreduce_us": 10, "allreduce_step_us": -1`},
		{"negative PCIe latency", `"pcie_collective_us": 50`, `"pcie_collective_us": -1`},
		{"negative sampling time", `"pcie_collective_us": 50`, `"pcie_collective_us": 50, "sampling_ns_per_logit": -1`},
		{"trailing data", "}\n", "} {}\n"},
	}
	for _, b := range bad {
		s := string(data)
		if !strings.Contains(s, b.edit) {
			t.Fatalf("%s: %q not in the profile", b.name, b.edit)
		}
		if _, err := ParseProfile([]byte(strings.Replace(s, b.edit, b.want, 1))); !errors.Is(err, ErrProfile) {
			t.Errorf("%s: err = %v", b.name, err)
		}
	}
	if _, err := ParseProfile(make([]byte, MaxProfileBytes+1)); !errors.Is(err, ErrProfile) {
		t.Fatalf("oversized profile: %v", err)
	}
}

func TestShippedProfilesLoad(t *testing.T) {
	files, _ := filepath.Glob("../../../profiles/*.json")
	if len(files) == 0 {
		t.Fatal("no profiles/*.json")
	}
	for _, f := range files {
		p, err := LoadProfile(f)
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.TrimSuffix(filepath.Base(f), ".json"); p.Name != want {
			t.Errorf("%s: name %q, want the file's name", f, p.Name)
		}
		// A decode of 64 sequences at 1,000 tokens of context must take a
		// plausible time for a datacenter GPU: 1–100 ms.
		ctx := make([]int, 64)
		for i := range ctx {
			ctx[i] = 1000
		}
		if d := p.Timing().StepTime(decode(ctx...)); d < time.Millisecond || d > 100*time.Millisecond {
			t.Errorf("%s: decode step %v", f, d)
		}
	}
}

func FuzzParseProfile(f *testing.F) {
	if data, err := os.ReadFile("../../../profiles/llama-3.1-8b-h100-tp1.json"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(`{"model":{"moe":{"num_experts":1,"experts_per_token":1,"expert_intermediate_size":1,"moe_layers":"9"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProfile(data)
		if err != nil {
			if !errors.Is(err, ErrProfile) {
				t.Fatalf("error %v does not wrap ErrProfile", err)
			}
			return
		}
		// A valid profile prices steps with finite, non-negative times.
		for _, s := range []engine.Step{decode(1, 1000), prefill(engine.Chunk{NewTokens: 512, Context: 100})} {
			if d := p.Timing().StepTime(s); d < 0 {
				t.Fatalf("negative step time %v", d)
			}
		}
	})
}

func BenchmarkRooflineStepTime(b *testing.B) {
	r := testProfile().Timing()
	ctx := make([]int, 128)
	for i := range ctx {
		ctx[i] = 500 + i*10
	}
	s := decode(ctx...)
	s.Prefill = []engine.Chunk{{NewTokens: 512, Context: 1024}}
	s.PrefillTokens = 512
	b.ReportAllocs()
	for b.Loop() {
		_ = r.StepTime(s)
	}
}
