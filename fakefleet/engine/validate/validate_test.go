package validate

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"switchyard/fakefleet/engine"
	"switchyard/internal/groundtruth"
)

func ptr[T any](v T) *T { return &v }

// sharedExp is a small synthetic inference-perf experiment: 2 groups × 3
// prompts, sparse arrivals over two stages.
func sharedExp() *groundtruth.Experiment {
	return &groundtruth.Experiment{
		ID:     "t-shared",
		Status: groundtruth.Status{Simulatable: true},
		Model:  groundtruth.Model{VocabSize: 1000},
		Engine: groundtruth.Engine{TP: 1, DP: 1, BlockSize: 16, MaxNumBatchedTokens: 2048, MaxNumSeqs: 8,
			GPUMemoryUtilization: 0.9, NumGPUBlocks: ptr(1000)},
		Workload: groundtruth.Workload{Kind: groundtruth.SharedPrefix, Simulatable: true,
			SharedPrefix: &groundtruth.SharedPrefixes{NumGroups: 2, PromptsPerGroup: 3, SystemPromptLen: 32, QuestionLen: 20, OutputLen: 4},
			Stages: []groundtruth.WorkloadStage{{Index: 0, RateRPS: 0.1, DurationS: 100, NumRequests: 10},
				{Index: 1, RateRPS: 0.1, DurationS: 50, NumRequests: 5}}},
	}
}

// constant prices a prefill step at 10 ms and a decode step at 5 ms.
func constant(exp *groundtruth.Experiment) Setup {
	return Setup{Engine: engine.Config{BlockSize: exp.Engine.BlockSize, TotalKVBlocks: 1000,
		MaxNumBatchedTokens: exp.Engine.MaxNumBatchedTokens, MaxNumSeqs: exp.Engine.MaxNumSeqs,
		Timing: engine.Constant{Prefill: 10 * time.Millisecond, Step: 5 * time.Millisecond}}}
}

func TestSharedPrefixPrompts(t *testing.T) {
	sp := groundtruth.SharedPrefixes{NumGroups: 3, PromptsPerGroup: 4, SystemPromptLen: 10, QuestionLen: 6}
	prompts := sharedPrefixPrompts(sp, 50000, rand.New(rand.NewPCG(1, 1)))
	if len(prompts) != 12 {
		t.Fatalf("%d prompts, want 12", len(prompts))
	}
	systems := map[string]int{}
	for _, p := range prompts {
		if len(p) != 16 {
			t.Fatalf("prompt of %d tokens, want 16", len(p))
		}
		systems[string(toBytes(p[:10]))]++
	}
	if len(systems) != 3 {
		t.Fatalf("%d distinct system prompts, want 3", len(systems))
	}
	for s, n := range systems {
		if n != 4 {
			t.Fatalf("system prompt %x shared by %d prompts, want 4", s[:4], n)
		}
	}
	// Shuffled once: the groups are not in generation order any more.
	inOrder := true
	for i := range 4 {
		inOrder = inOrder && slices.Equal(prompts[i][:10], prompts[0][:10])
	}
	if inOrder {
		t.Error("prompts were not shuffled")
	}
	again := sharedPrefixPrompts(sp, 50000, rand.New(rand.NewPCG(1, 1)))
	if !reflect.DeepEqual(prompts, again) {
		t.Error("the same seed gave other prompts")
	}
}

func toBytes(ids []uint32) []byte {
	b := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		b = append(b, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	}
	return b
}

func TestStageRequestsCycleAndSpanTheDuration(t *testing.T) {
	prompts := [][]uint32{{1}, {2}, {3}}
	st := groundtruth.WorkloadStage{RateRPS: 4, DurationS: 25, NumRequests: 100}
	reqs := stageRequests(st, 0, prompts, 7, rand.New(rand.NewPCG(3, 3)))
	if len(reqs) != 100 {
		t.Fatalf("%d requests", len(reqs))
	}
	for n, r := range reqs {
		if r.tokens[0] != uint32(n%3+1) || r.maxTokens != 7 {
			t.Fatalf("request %d sends prompt %v with %d tokens out", n, r.tokens, r.maxTokens)
		}
		if n > 0 && r.offset < reqs[n-1].offset {
			t.Fatalf("arrivals go back at %d", n)
		}
	}
	if last := reqs[99].offset; last != 25*time.Second {
		t.Fatalf("last arrival at %v, want the stage's end", last)
	}
	// Poisson-like: gaps vary (evenly spaced would be 250 ms each).
	if g1, g2 := reqs[1].offset-reqs[0].offset, reqs[2].offset-reqs[1].offset; g1 == g2 {
		t.Errorf("equal gaps %v", g1)
	}
}

func TestRunMeasuresClientSideWithOverhead(t *testing.T) {
	exp := sharedExp()
	setup := constant(exp)
	setup.ClientOverhead = 7 * time.Millisecond
	pred, err := Run(exp, setup, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse arrivals: every request runs alone, a 10 ms prefill then 3
	// decode steps of 5 ms.
	for _, s := range append(pred.Stages, pred.Summary) {
		if s.Failed != 0 || !near(s.TTFT.Mean, 17) || !near(s.TTFT.P90, 17) || !near(s.E2E.Mean, 32) || !near(s.TPOTMs, 5) {
			t.Fatalf("stage %+v, want TTFT 17 ms, E2E 32 ms, TPOT 5 ms", s)
		}
	}
	if pred.Stages[0].Completed != 10 || pred.Stages[1].Completed != 5 || pred.Summary.Completed != 15 {
		t.Fatalf("completed %d/%d/%d", pred.Stages[0].Completed, pred.Stages[1].Completed, pred.Summary.Completed)
	}
	if pred.Requests != nil {
		t.Error("per-request timings for an aggregate set")
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestStagesFollowEachOtherOnAWarmEngine(t *testing.T) {
	exp := sharedExp()
	d := newDriver(1, constant(exp), nil)
	reqs := d.runStages(exp, 9)
	lastDone := time.Time{}
	for _, r := range reqs[:10] {
		if r.done.After(lastDone) {
			lastDone = r.done
		}
	}
	if want := lastDone.Add(StageGap).Add(reqs[10].offset); !reqs[10].sent.Equal(want) {
		t.Fatalf("stage 1 starts at %v, want 1 s after stage 0's last finish plus its first gap (%v)", reqs[10].sent, want)
	}
	// 15 requests over 6 prompts: from the 7th on, the whole prompt's
	// full blocks are cached.
	if got := d.ranks[0].Stats().CachedTokens; got < 9*48 {
		t.Fatalf("%d cached prompt tokens, want at least %d", got, 9*48)
	}
}

func TestRunIsDeterministicPerSeed(t *testing.T) {
	exp := sharedExp()
	exp.Workload.Stages[0].RateRPS, exp.Workload.Stages[0].DurationS = 50, 0.2 // a queue, so arrivals matter
	setup, err := Mocker(exp)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := Run(exp, setup, 4)
	b, _ := Run(exp, setup, 4)
	c, _ := Run(exp, setup, 5)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two predictions")
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("another seed gave the same prediction")
	}
}

// traceExp is a synthetic per-request experiment (D-like).
func traceExp(reqs ...groundtruth.Request) *groundtruth.Experiment {
	exp := sharedExp()
	exp.Workload = groundtruth.Workload{Kind: groundtruth.RequestTrace, Simulatable: true,
		PrefixBlocks: &groundtruth.PrefixBlocks{BlockSizeTokens: 16}}
	exp.Requests = reqs
	exp.Measured = groundtruth.Measured{Stages: []groundtruth.MeasuredStage{{Index: 0, Window: "arrival_s < 9.0"}}}
	return exp
}

func TestTraceTokensShareExactlyTheRecordedPrefixes(t *testing.T) {
	exp := traceExp(
		groundtruth.Request{ID: "a", InputTokens: 40, OutputTokens: 2, PrefixBlockIDs: []uint64{1, 2}},
		groundtruth.Request{ID: "b", InputTokens: 40, OutputTokens: 2, PrefixBlockIDs: []uint64{1, 3}},
		groundtruth.Request{ID: "c", InputTokens: 20, OutputTokens: 2, SharedPrefixGroup: ptr(0), SharedPrefixTokens: 10},
		groundtruth.Request{ID: "d", InputTokens: 30, OutputTokens: 2, SharedPrefixGroup: ptr(0), SharedPrefixTokens: 10},
		groundtruth.Request{ID: "e", InputTokens: 30, OutputTokens: 2, SharedPrefixGroup: ptr(1), SharedPrefixTokens: 10},
	)
	reqs := traceRequests(exp, rand.New(rand.NewPCG(1, 2)))
	a, b, c, d, e := reqs[0].tokens, reqs[1].tokens, reqs[2].tokens, reqs[3].tokens, reqs[4].tokens
	switch {
	case !slices.Equal(a[:16], b[:16]):
		t.Error("equal first block ids, different tokens")
	case slices.Equal(a[16:32], b[16:32]):
		t.Error("different block ids, equal tokens")
	case slices.Equal(a[32:], b[32:]):
		t.Error("the unhashed tails are equal")
	case !slices.Equal(c[:10], d[:10]) || slices.Equal(c[10:20], d[10:20]):
		t.Error("group 0 does not share exactly its 10-token prefix")
	case slices.Equal(c[:10], e[:10]):
		t.Error("groups 0 and 1 share a prefix")
	}
}

func TestTraceTimesFromArrivalAndWindows(t *testing.T) {
	exp := traceExp(
		groundtruth.Request{ID: "late", ArrivalS: 10, InputTokens: 16, OutputTokens: 3},
		groundtruth.Request{ID: "early", ArrivalS: 1, InputTokens: 16, OutputTokens: 3},
	)
	exp.Measured.Summary = &groundtruth.MeasuredStage{Window: "all requests"}
	pred, err := Run(exp, constant(exp), 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []RequestTiming{{ID: "late", TTFTMs: 10, E2EMs: 20}, {ID: "early", TTFTMs: 10, E2EMs: 20}}
	if !reflect.DeepEqual(pred.Requests, want) {
		t.Fatalf("requests %+v, want %+v (in file order, timed from arrival)", pred.Requests, want)
	}
	if pred.Stages[0].Completed != 1 || pred.Stages[0].Window != "arrival_s < 9.0" || pred.Summary.Completed != 2 {
		t.Fatalf("stage %+v, summary %+v", pred.Stages[0], pred.Summary)
	}
	exp.Measured.Stages[0].Window = "the good ones"
	if _, err := Run(exp, constant(exp), 1); err == nil {
		t.Error("an unknown window was accepted")
	}
}

func TestDataParallelRanksShareTheLoad(t *testing.T) {
	two := func(dp int) Prediction {
		exp := traceExp(
			groundtruth.Request{ID: "a", ArrivalS: 1, InputTokens: 64, OutputTokens: 1},
			groundtruth.Request{ID: "b", ArrivalS: 1, InputTokens: 64, OutputTokens: 1},
		)
		exp.Engine.DP = dp
		setup := constant(exp)
		setup.Engine.MaxNumBatchedTokens = 64 // one prompt per step
		pred, err := Run(exp, setup, 1)
		if err != nil {
			t.Fatal(err)
		}
		return pred
	}
	if p := two(1); p.Requests[1].TTFTMs != 20 {
		t.Fatalf("one rank: second TTFT %v ms, want 20 (after the first prefill)", p.Requests[1].TTFTMs)
	}
	if p := two(2); p.Requests[0].TTFTMs != 10 || p.Requests[1].TTFTMs != 10 {
		t.Fatalf("two ranks: TTFTs %v, want 10 ms each", p.Requests)
	}
}

func TestRejectedRequestsCountAsFailed(t *testing.T) {
	exp := traceExp(groundtruth.Request{ID: "huge", InputTokens: 4000, OutputTokens: 2},
		groundtruth.Request{ID: "ok", InputTokens: 16, OutputTokens: 2})
	setup := constant(exp)
	setup.Engine.TotalKVBlocks = 10
	pred, err := Run(exp, setup, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !pred.Requests[0].Failed || pred.Requests[1].Failed || pred.Stages[0].Failed != 1 || pred.Stages[0].Completed != 1 {
		t.Fatalf("requests %+v, stage %+v", pred.Requests, pred.Stages[0])
	}
}

func TestCheckAndMockerSayWhy(t *testing.T) {
	exp := sharedExp()
	exp.Status.Simulatable = false
	if err := Check(exp); !errors.Is(err, ErrNotSimulatable) {
		t.Errorf("status not simulatable: %v", err)
	}
	if _, err := Run(exp, Setup{}, 1); !errors.Is(err, ErrNotSimulatable) {
		t.Errorf("Run of an unsimulatable experiment: %v", err)
	}
	exp = sharedExp()
	exp.Engine.NumGPUBlocks = nil
	if _, err := Mocker(exp); !errors.Is(err, ErrNotSimulatable) {
		t.Errorf("unknown GPU and KV capacity: %v", err)
	}
	exp = traceExp()
	if err := Check(exp); !errors.Is(err, ErrNotSimulatable) {
		t.Errorf("trace without requests: %v", err)
	}
}

func TestKVBlocksPerRank(t *testing.T) {
	exp := sharedExp()
	exp.Engine.NumGPUBlocks = nil
	exp.Hardware.MemoryGB = ptr(80.0)
	exp.Model = groundtruth.Model{ParamsTotal: 8e9, WeightBytesPerParam: 2, KVCacheBytesPerToken: 131072}
	exp.Engine.TP = 2
	got, err := KVBlocksPerRank(exp)
	// 2 GPUs × 80 GB × 0.9 − 16 GB of weights = 128 GB, over 131072 B × 16 per block.
	if want := int(math.Floor(128e9 / (131072 * 16))); err != nil || got != want {
		t.Fatalf("KVBlocksPerRank = %d, %v; want %d", got, err, want)
	}
	exp.Engine.NumGPUBlocks = ptr(2588)
	if got, _ := KVBlocksPerRank(exp); got != 2588 {
		t.Fatalf("logged capacity ignored: %d", got)
	}
}

func TestParseWindow(t *testing.T) {
	cases := []struct {
		win  string
		at   float64
		want bool
	}{
		{"all requests", 1e6, true}, {"", 0, true}, {"arrival_s < 9.0", 8.99, true}, {"arrival_s < 9.0", 9, false},
		{"arrival_s >= 9.0", 9, true}, {"arrival_s <= 2", 2, true}, {"arrival_s > 2", 2, false},
	}
	for _, c := range cases {
		in, err := parseWindow(c.win)
		if err != nil || in(c.at) != c.want {
			t.Errorf("%q at %v: %v, %v", c.win, c.at, err, c.want)
		}
	}
	for _, bad := range []string{"arrival_s < soon", "arrival_s < NaN", "id < 3", "arrival_s == 3"} {
		if _, err := parseWindow(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestPercentileInterpolatesLikeNumpy(t *testing.T) {
	v := []float64{1, 2, 3, 4}
	if p := percentile(v, 90); !near(p, 3.7) { // numpy.percentile([1,2,3,4], 90) = 3.7
		t.Fatalf("p90 = %v", p)
	}
	q := quantiles([]float64{4, 1, 3, 2})
	if !near(q.Mean, 2.5) || !near(q.P50, 2.5) || !near(q.P99, 3.97) {
		t.Fatalf("quantiles %+v", q)
	}
}
