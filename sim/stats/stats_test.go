package stats

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

const ms1 = time.Millisecond

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPercentileNearestRank(t *testing.T) {
	// 1..10: p50 is the 5th value, p90 the 9th, p99 the 10th.
	vals := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct{ p, want float64 }{{0, 1}, {10, 1}, {11, 2}, {50, 5}, {90, 9}, {91, 10}, {99, 10}, {100, 10}} {
		if got := Percentile(vals, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("empty p50 = %v", got)
	}
	if got := Percentile([]float64{7}, 99); got != 7 {
		t.Errorf("single p99 = %v", got)
	}
}

func TestLatencyPercentilesOverCompletedOnly(t *testing.T) {
	c := NewCollector(SLO{})
	// Completed TTFTs 40, 10, 30, 20 ms (added out of order); a failed request with a huge TTFT
	// must not count.
	for i, ttft := range []int{40, 10, 30, 20} {
		c.Add(Request{ID: uint64(i + 1), TTFT: time.Duration(ttft) * ms1, E2E: time.Duration(ttft*10) * ms1,
			OutputTokens: 11, ITL: time.Duration(ttft) * ms1 / 10, Status: StatusOK, Worker: "w"})
	}
	c.Add(Request{ID: 9, TTFT: time.Hour, Status: "failed", Worker: "w"})
	s := c.Summary(time.Second)
	if s.TTFT != (Percentiles{P50: 20, P90: 40, P99: 40, Mean: 25}) {
		t.Errorf("TTFT = %+v", s.TTFT)
	}
	if s.E2E != (Percentiles{P50: 200, P90: 400, P99: 400, Mean: 250}) {
		t.Errorf("E2E = %+v", s.E2E)
	}
	if !near(s.ITL.P50, 2) || !near(s.ITL.P99, 4) || !near(s.ITL.Mean, 2.5) {
		t.Errorf("ITL = %+v", s.ITL)
	}
	if s.Requests != 5 || s.Completed != 4 || s.Failed != 1 || s.Statuses["failed"] != 1 {
		t.Errorf("counts = %d/%d/%d %v", s.Requests, s.Completed, s.Failed, s.Statuses)
	}
}

func TestITLSkipsSingleTokenRequests(t *testing.T) {
	c := NewCollector(SLO{ITL: 5 * ms1})
	c.Add(Request{ID: 1, OutputTokens: 1, Status: StatusOK})               // no ITL: not in ITL stats, meets the ITL bound
	c.Add(Request{ID: 2, OutputTokens: 3, ITL: 8 * ms1, Status: StatusOK}) // violates
	c.Add(Request{ID: 3, OutputTokens: 3, ITL: 5 * ms1, Status: StatusOK}) // at the bound: meets
	s := c.Summary(2 * time.Second)
	if s.ITL != (Percentiles{P50: 5, P90: 8, P99: 8, Mean: 6.5}) {
		t.Errorf("ITL = %+v", s.ITL)
	}
	if s.Good != 2 {
		t.Errorf("good = %d, want 2", s.Good)
	}
}

func TestThroughputAndGoodput(t *testing.T) {
	c := NewCollector(SLO{TTFT: 100 * ms1, ITL: 20 * ms1})
	add := func(status string, ttft, itl time.Duration, out int) {
		c.Add(Request{TTFT: ttft, ITL: itl, OutputTokens: out, Status: status, Worker: "w"})
	}
	add(StatusOK, 50*ms1, 10*ms1, 100)  // good
	add(StatusOK, 150*ms1, 10*ms1, 100) // TTFT too slow
	add(StatusOK, 50*ms1, 30*ms1, 100)  // ITL too slow
	add(StatusOK, 100*ms1, 20*ms1, 100) // on both bounds: good
	add("rejected", 0, 0, 0)
	add("cancelled", 0, 0, 0)
	add("failed", 10*ms1, 1*ms1, 0) // fast but failed: not good
	add("failed", 0, 0, 0)
	s := c.Summary(4 * time.Second)
	if s.Requests != 8 || s.Completed != 4 || s.Good != 2 || s.Failed != 4 {
		t.Fatalf("counts %+v", s)
	}
	if !near(s.ThroughputRPS, 1) || !near(s.OutputTokensPerS, 100) || !near(s.GoodputRPS, 0.5) || !near(s.GoodputRatio, 0.25) {
		t.Errorf("rates: thr %v tok %v goodput %v ratio %v", s.ThroughputRPS, s.OutputTokensPerS, s.GoodputRPS, s.GoodputRatio)
	}
	want := map[string]int{"rejected": 1, "cancelled": 1, "failed": 2}
	if len(s.Statuses) != len(want) {
		t.Errorf("statuses %v", s.Statuses)
	}
	for k, v := range want {
		if s.Statuses[k] != v {
			t.Errorf("statuses[%s] = %d, want %d", k, s.Statuses[k], v)
		}
	}
	// No duration: rates are 0, not Inf.
	z := c.Summary(0)
	if z.ThroughputRPS != 0 || z.GoodputRPS != 0 || z.OutputTokensPerS != 0 || !near(z.GoodputRatio, 0.25) {
		t.Errorf("zero duration: %+v", z)
	}
}

func TestHitRatioOverRequestsThatReachedAWorker(t *testing.T) {
	c := NewCollector(SLO{})
	c.Add(Request{ID: 2, Arrival: 2 * time.Second, PromptTokens: 100, CachedTokens: 50, Status: StatusOK, Worker: "a"})
	c.Add(Request{ID: 1, Arrival: 1 * time.Second, PromptTokens: 100, CachedTokens: 0, Status: StatusOK, Worker: "b"})
	c.Add(Request{ID: 3, Arrival: 3 * time.Second, PromptTokens: 200, CachedTokens: 150, Status: "failed", Worker: "a"})
	c.Add(Request{ID: 4, Arrival: 4 * time.Second, PromptTokens: 1000, Status: "rejected"}) // never reached a worker
	s := c.Summary(4 * time.Second)
	if s.PromptTokens != 400 || s.CachedTokens != 200 || !near(s.HitRatio, 0.5) {
		t.Errorf("hit: %d/%d = %v", s.CachedTokens, s.PromptTokens, s.HitRatio)
	}
	// Cumulative in arrival order, not Add order: 0/100, 50/200, 200/400.
	want := []Point{{1, 0}, {2, 0.25}, {3, 0.5}}
	if !slices.Equal(s.Series.HitRatio, want) {
		t.Errorf("hit series %v, want %v", s.Series.HitRatio, want)
	}
}

func seqTokens(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func TestHitRatioBound(t *testing.T) {
	c := NewCollector(SLO{})
	prefix := seqTokens(1000, 8)                               // two blocks of 4
	p1 := append(slices.Clone(prefix), seqTokens(0, 4)...)     // 12 tokens: 3 blocks, all new
	p2 := append(slices.Clone(prefix), seqTokens(100, 6)...)   // 14 tokens: prefix hits (8), block 3 new, 2 partial
	p3 := append(slices.Clone(prefix), seqTokens(100, 4)...)   // 12 tokens: prefix + p2's third block: 12 hit
	p4 := append(seqTokens(5000, 4), seqTokens(1004, 4)...)    // second prefix block after a different first: no hit
	p5 := append(slices.Clone(prefix[:4]), seqTokens(7, 2)...) // first block hits; 2-token partial never
	for _, p := range [][]uint32{p1, p2, p3, p4, p5} {
		c.AddPrompt(p, 4)
	}
	// hits: 0 + 8 + 12 + 0 + 4 = 24; tokens: 12 + 14 + 12 + 8 + 6 = 52.
	s := c.Summary(time.Second)
	if !near(s.HitRatioBound, 24.0/52) {
		t.Errorf("bound = %v, want %v", s.HitRatioBound, 24.0/52)
	}
	// The same prompt again is a full hit on its complete blocks only.
	c.AddPrompt(p2, 4)
	if got := c.Summary(time.Second).HitRatioBound; !near(got, (24.0+12)/(52+14)) {
		t.Errorf("bound after repeat = %v", got)
	}
}

func TestBoundThreePromptsSharingAPrefix(t *testing.T) {
	c := NewCollector(SLO{})
	shared := seqTokens(1, 8)
	for i := range 3 {
		c.AddPrompt(append(slices.Clone(shared), seqTokens(100*(i+1), 4)...), 4)
	}
	// First prompt: 0 of 12; the next two hit their two shared blocks: 16 of 36.
	if got := c.Summary(0).HitRatioBound; !near(got, 16.0/36) {
		t.Errorf("bound = %v, want %v", got, 16.0/36)
	}
}

func TestImbalanceTwoWorkers(t *testing.T) {
	c := NewCollector(SLO{})
	s := func(at int, w string, b uint64) {
		c.AddLoad(LoadSample{At: time.Duration(at) * time.Second, Worker: w, ActiveBlocks: b})
	}
	// Added out of order on purpose.
	s(6, "b", 0)
	s(0, "a", 4)
	s(2, "b", 4)
	s(4, "a", 0)
	// [0,2): a=4 b=0 (b counts from the start): max 4 / mean 2 = 2
	// [2,4): 4,4 -> 1;  [4,6): 0,4 -> 2;  [6,8): mean 0, excluded.
	sum := c.Summary(8 * time.Second)
	if want := (2*2 + 1*2 + 2*2) / 6.0; !near(sum.Imbalance, want) {
		t.Errorf("imbalance = %v, want %v", sum.Imbalance, want)
	}
	wantImb := []Point{{0, 2}, {2, 1}, {4, 2}, {6, 0}, {8, 0}}
	if !slices.Equal(sum.Series.Imbalance, wantImb) {
		t.Errorf("imbalance series %v, want %v", sum.Series.Imbalance, wantImb)
	}
	if len(sum.Series.Load) != 2 || sum.Series.Load[0].Worker != "a" || sum.Series.Load[1].Worker != "b" {
		t.Fatalf("load series %+v", sum.Series.Load)
	}
	if want := []Point{{0, 4}, {4, 0}, {8, 0}}; !slices.Equal(sum.Series.Load[0].Points, want) {
		t.Errorf("a: %v, want %v", sum.Series.Load[0].Points, want)
	}
	if want := []Point{{2, 4}, {6, 0}, {8, 0}}; !slices.Equal(sum.Series.Load[1].Points, want) {
		t.Errorf("b: %v, want %v", sum.Series.Load[1].Points, want)
	}
}

func TestImbalanceSameInstantLastWins(t *testing.T) {
	c := NewCollector(SLO{})
	c.AddLoad(LoadSample{At: 0, Worker: "a", ActiveBlocks: 100})
	c.AddLoad(LoadSample{At: 0, Worker: "a", ActiveBlocks: 3})
	c.AddLoad(LoadSample{At: 0, Worker: "b", ActiveBlocks: 1})
	// a=3, b=1 for the whole run: 3 / 2 = 1.5. Duration shorter than the samples: end is the
	// last sample, so nothing is measured beyond it.
	if got := c.Summary(10 * time.Second).Imbalance; !near(got, 1.5) {
		t.Errorf("imbalance = %v, want 1.5", got)
	}
	if got := NewCollector(SLO{}).Summary(time.Second).Imbalance; got != 0 {
		t.Errorf("no samples: %v", got)
	}
}

func TestReasons(t *testing.T) {
	c := NewCollector(SLO{})
	for _, r := range []string{"load", "kv_aware", "load", "", "round_robin"} {
		c.Add(Request{Reason: r, Status: StatusOK})
	}
	got := c.Summary(time.Second).Reasons
	if len(got) != 3 || got["load"] != 2 || got["kv_aware"] != 1 || got["round_robin"] != 1 {
		t.Errorf("reasons %v", got)
	}
}

func TestDownsampleKeepsEndsAndOrder(t *testing.T) {
	for _, n := range []int{0, 1, 2, 5, 199, 200, 201, 1000, 12031} {
		pts := make([]Point, n)
		for i := range pts {
			pts[i] = Point{X: float64(i), Y: float64(i)}
		}
		got := Downsample(pts, 200)
		if len(got) != min(n, 200) {
			t.Fatalf("n=%d: %d points", n, len(got))
		}
		if n == 0 {
			continue
		}
		if got[0] != pts[0] || got[len(got)-1] != pts[n-1] {
			t.Errorf("n=%d: ends %v %v", n, got[0], got[len(got)-1])
		}
		for i := 1; i < len(got); i++ {
			if got[i].X <= got[i-1].X {
				t.Fatalf("n=%d: not strictly increasing at %d", n, i)
			}
		}
	}
}

func TestCDFMonotoneAndBounded(t *testing.T) {
	c := NewCollector(SLO{})
	// A skewed distribution with many ties.
	for i := range 5000 {
		d := time.Duration((i*7919)%97) * ms1
		c.Add(Request{ID: uint64(i), TTFT: d, E2E: d * 3, ITL: d / 5, OutputTokens: 2, Status: StatusOK})
	}
	s := c.Summary(time.Second)
	for name, cdf := range map[string][]Point{"ttft": s.Series.TTFT, "itl": s.Series.ITL, "e2e": s.Series.E2E} {
		if len(cdf) == 0 || len(cdf) > MaxCDFPoints {
			t.Fatalf("%s: %d points", name, len(cdf))
		}
		for i := 1; i < len(cdf); i++ {
			if cdf[i].X < cdf[i-1].X || cdf[i].Y <= cdf[i-1].Y {
				t.Fatalf("%s: not monotone at %d: %v %v", name, i, cdf[i-1], cdf[i])
			}
		}
		if cdf[len(cdf)-1].Y != 1 || cdf[0].Y != 1.0/5000 {
			t.Errorf("%s: ends %v %v", name, cdf[0], cdf[len(cdf)-1])
		}
	}
	if s.Series.TTFT[0].X != 0 || s.Series.TTFT[len(s.Series.TTFT)-1].X != 96 {
		t.Errorf("ttft cdf range %v..%v", s.Series.TTFT[0], s.Series.TTFT[len(s.Series.TTFT)-1])
	}
}

func TestDownsampleStepKeepsPeaks(t *testing.T) {
	n := 10000
	pts := make([]Point, n)
	for i := range pts {
		pts[i] = Point{X: float64(i), Y: float64(i % 10)}
	}
	pts[4321].Y = 1000 // a spike
	got := DownsampleStep(pts, 500)
	if len(got) > 500 || got[0] != pts[0] || got[len(got)-1] != pts[n-1] {
		t.Fatalf("len %d ends %v %v", len(got), got[0], got[len(got)-1])
	}
	found := false
	for i, p := range got {
		if i > 0 && p.X < got[i-1].X {
			t.Fatalf("X not ordered at %d", i)
		}
		found = found || p == pts[4321]
	}
	if !found {
		t.Error("spike lost")
	}
	if got := DownsampleStep(pts[:3], 500); !slices.Equal(got, pts[:3]) {
		t.Errorf("short series changed: %v", got)
	}
}

func TestLoadSeriesBounded(t *testing.T) {
	c := NewCollector(SLO{})
	for i := range 20000 {
		w := []string{"w0", "w1", "w2"}[i%3]
		c.AddLoad(LoadSample{At: time.Duration(i) * ms1, Worker: w, ActiveBlocks: uint64(i % 50)})
	}
	s := c.Summary(30 * time.Second)
	if len(s.Series.Imbalance) > MaxImbalancePoints {
		t.Errorf("imbalance series %d points", len(s.Series.Imbalance))
	}
	for _, l := range s.Series.Load {
		if len(l.Points) > MaxLoadPoints || l.Points[len(l.Points)-1].X != 30 {
			t.Errorf("%s: %d points, last %v", l.Worker, len(l.Points), l.Points[len(l.Points)-1])
		}
	}
	if s.Imbalance < 1 {
		t.Errorf("imbalance %v < 1", s.Imbalance)
	}
}

func TestSummaryDeterministicAndFinite(t *testing.T) {
	build := func() []byte {
		c := NewCollector(SLO{TTFT: time.Second})
		c.Add(Request{Status: "refused", Reason: "load"})
		b, err := json.Marshal(c.Summary(0))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := build(), build()
	if string(a) != string(b) {
		t.Fatalf("not deterministic:\n%s\n%s", a, b)
	}
	if strings.Contains(string(a), "NaN") || strings.Contains(string(a), "Inf") {
		t.Fatalf("non-finite: %s", a)
	}
	if strings.Contains(string(a), "Series") || strings.Contains(string(a), "TTFT") {
		t.Fatalf("series leaked into JSON: %s", a)
	}
}

// Summary must not consume the collector: a second call sees the same figures plus later adds.
func TestSummaryRepeatable(t *testing.T) {
	c := NewCollector(SLO{})
	c.Add(Request{TTFT: 30 * ms1, Status: StatusOK})
	c.Add(Request{TTFT: 10 * ms1, Status: StatusOK})
	first := c.Summary(time.Second)
	again := c.Summary(time.Second)
	if first.TTFT != again.TTFT {
		t.Fatalf("%+v vs %+v", first.TTFT, again.TTFT)
	}
	c.Add(Request{TTFT: 20 * ms1, Status: StatusOK})
	if got := c.Summary(time.Second).TTFT.P50; got != 20 {
		t.Errorf("p50 after add = %v", got)
	}
}

func TestNaturalWorkerOrder(t *testing.T) {
	names := []string{"decode-10", "decode-2", "prefill-1", "decode-02", "decode-1", "a", ""}
	slices.SortFunc(names, naturalCompare)
	want := []string{"", "a", "decode-1", "decode-02", "decode-2", "decode-10", "prefill-1"}
	if !slices.Equal(names, want) {
		t.Errorf("order %q, want %q", names, want)
	}
	c := NewCollector(SLO{})
	for _, w := range []string{"w10", "w9", "w1"} {
		c.AddLoad(LoadSample{Worker: w, ActiveBlocks: 1})
	}
	var got []string
	for _, l := range c.Summary(time.Second).Series.Load {
		got = append(got, l.Worker)
	}
	if want := []string{"w1", "w9", "w10"}; !slices.Equal(got, want) {
		t.Errorf("series order %q, want %q", got, want)
	}
}
