package validate

import (
	"errors"
	"math"
	"testing"
	"time"

	"switchyard/fakefleet/engine/perf"
	"switchyard/internal/groundtruth"
)

func TestLoss(t *testing.T) {
	nan := math.NaN()
	// Two experiments: APEs 10, 20, 30 (mean 20) and −10, −20, −30 (mean
	// 20); the biases cancel, so the loss is the mean APE.
	balanced := []PE{{nan, nan, 10, nan, 20}, {nan, nan, -10, nan, -20}}
	balanced[0][TTFTMean], balanced[1][TTFTMean] = 30, -30
	if got := Loss(balanced); math.Abs(got-20) > 1e-9 {
		t.Fatalf("balanced loss %v, want 20", got)
	}
	// The same APEs all of one sign add their bias: 20 + mean(30, 10, 20).
	biased := []PE{{30, nan, 10, nan, 20}, {30, nan, 10, nan, 20}}
	if got := Loss(biased); math.Abs(got-40) > 1e-9 {
		t.Fatalf("biased loss %v, want 40", got)
	}
	// A saturated experiment counts as LossAPECap, not its thousands.
	capped := []PE{{5000, nan, 5000, nan, 5000}}
	if got := Loss(capped); got != 2*LossAPECap {
		t.Fatalf("capped loss %v, want %v", got, 2*LossAPECap)
	}
	// Metrics outside the loss and missing figures do not count.
	other := []PE{{nan, 500, 10, 500, nan}}
	if got := Loss(other); got != 20 {
		t.Fatalf("loss %v, want 20 (E2E mean's APE and bias only)", got)
	}
	if !math.IsInf(Loss(nil), 1) {
		t.Fatal("no experiment must be an infinite loss")
	}
}

func TestScaledKeepsRates(t *testing.T) {
	exp := sharedExp()
	exp.Workload.Stages = []groundtruth.WorkloadStage{{Index: 0, RateRPS: 8, DurationS: 600, NumRequests: 4800},
		{Index: 1, RateRPS: 20, DurationS: 10, NumRequests: 200}}
	s := Scaled(exp, 0.1)
	if got := s.Workload.Stages[0]; got.NumRequests != 480 || math.Abs(got.DurationS-60) > 1e-9 || got.RateRPS != 8 {
		t.Fatalf("stage 0 scaled to %+v, want 480 requests in 60 s at 8/s", got)
	}
	// A stage below MinScaledRequests keeps all of its requests.
	if got := s.Workload.Stages[1]; got.NumRequests != 200 || got.DurationS != 10 {
		t.Fatalf("stage 1 scaled to %+v, want it whole", got)
	}
	if exp.Workload.Stages[0].NumRequests != 4800 {
		t.Fatal("Scaled changed its argument")
	}
	if Scaled(exp, 1) != exp || Scaled(exp, 0) != exp {
		t.Fatal("a share outside (0, 1) must leave the experiment whole")
	}
	trace := &groundtruth.Experiment{Workload: groundtruth.Workload{Kind: groundtruth.RequestTrace}}
	if Scaled(trace, 0.1) != trace {
		t.Fatal("a request trace must not be scaled")
	}
}

// tinyDeployment is a small dense model on an H100-like GPU: a step costs
// about 0.1 ms of weight reads plus the profile's overheads.
func tinyDeployment() perf.Profile {
	return perf.Profile{
		Name: "tiny",
		Model: perf.ModelSpec{HFName: "tiny", NumLayers: 4, HiddenSize: 512, IntermediateSize: 1024, NumAttentionHeads: 8,
			NumKeyValueHeads: 8, HeadDim: 64, VocabSize: 1000, ParamsTotal: 1e8, ParamsActivePerToken: 1e8,
			WeightBytesPerParam: 2, KVCacheBytesPerToken: 8192},
		GPU: perf.GPUSpec{GPU: "test GPU", MemoryGB: 80, HBMBandwidthTBps: 3.35, PeakBF16TFlopsDense: 989},
		Coefficients: perf.Coefficients{MatmulEfficiency: 0.5, AttentionEfficiency: 0.5, BandwidthEfficiency: 0.8,
			StepOverheadUs: 20000, SeqOverheadUs: 0},
		Overheads: perf.Overheads{RequestMs: 7},
	}.WithDefaults()
}

func TestProfileSetupAddsClientOverheadToClientSideSetsOnly(t *testing.T) {
	p := tinyDeployment()
	shared := sharedExp()
	s, err := ProfileSetup(shared, p)
	if err != nil {
		t.Fatal(err)
	}
	if s.ClientOverhead != 7*time.Millisecond {
		t.Fatalf("client overhead %v, want the profile's 7 ms", s.ClientOverhead)
	}
	pred, err := Run(shared, s, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse arrivals: every step is one sequence, 20 ms of overhead. The
	// client's first chunk carries two tokens, so TTFT is the overhead, the
	// prefill step and one decode step, and E2E − TTFT spans the other 2 of
	// the 4 tokens: TPOT = 2/3 of a step.
	if step := pred.Summary.TPOTMs * 3 / 2; step < 20 || step > 21 {
		t.Fatalf("TPOT %.2f ms, want 2/3 of the profile's 20 ms step plus weight reads", pred.Summary.TPOTMs)
	}
	if ttft := pred.Summary.TTFT.Mean; ttft < 47 || ttft > 50 {
		t.Fatalf("TTFT %.2f ms, want 7 ms of client overhead and two 20 ms steps", ttft)
	}
	trace := &groundtruth.Experiment{Workload: groundtruth.Workload{Kind: groundtruth.RequestTrace}}
	if s, err := ProfileSetup(trace, p); err != nil || s.ClientOverhead != 0 {
		t.Fatalf("a per-request set measured in the server: overhead %v, %v", s.ClientOverhead, err)
	}
	if _, err := Deployment(shared, p); !errors.Is(err, ErrNotSimulatable) {
		t.Fatalf("an experiment not read from a folder: %v", err)
	}
}
