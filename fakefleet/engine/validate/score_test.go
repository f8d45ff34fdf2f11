package validate

import (
	"math"
	"testing"

	"switchyard/internal/groundtruth"
)

func scoredExp() *groundtruth.Experiment {
	exp := sharedExp()
	st := groundtruth.MeasuredStage{Index: 0, TTFT: groundtruth.Dist{Mean: ptr(20.0), P90: ptr(25.0)},
		E2E: groundtruth.Dist{Mean: ptr(100.0)}, TPOTTrueMs: ptr(10.0)}
	exp.Measured = groundtruth.Measured{Stages: []groundtruth.MeasuredStage{st}}
	exp.Baselines = map[string]groundtruth.Baseline{"blis_trained_physics": {Stages: []groundtruth.BaselineStage{
		{Index: 0, TTFT: groundtruth.Dist{Mean: ptr(18.0)}, E2E: groundtruth.Dist{Mean: ptr(110.0)}, ITLMeanMs: ptr(11.0)}}}}
	return exp
}

func TestScore(t *testing.T) {
	exp := scoredExp()
	s := StageStats{Index: 0, TTFT: Quantiles{Mean: 25, P90: 20}, E2E: Quantiles{Mean: 90, P90: 95}, TPOTMs: 9}
	e := Score(exp, Prediction{Stages: []StageStats{s}, Summary: s})
	want := PE{25, -20, -10, math.NaN(), -10}
	for _, pe := range []PE{e.Stages[0], e.Summary} { // one stage: it is the summary
		for m := range NumMetrics {
			if !(near(pe[m], want[m]) || math.IsNaN(want[m]) && math.IsNaN(pe[m])) {
				t.Fatalf("%s error %v, want %v", m, pe[m], want[m])
			}
		}
	}
	b, ok := ScoreBaseline(exp, "blis_trained_physics")
	if !ok || !near(b.Summary[TTFTMean], -10) || !near(b.Summary[E2EMean], 10) || !near(b.Summary[TPOT], 10) || !math.IsNaN(b.Summary[TTFTP90]) {
		t.Fatalf("baseline errors %+v (its itl_ms_mean scores against tpot_true_ms)", b.Summary)
	}
	if _, ok := ScoreBaseline(exp, "vidur"); ok {
		t.Error("a missing baseline scored")
	}
}

func TestSummarize(t *testing.T) {
	nan := math.NaN()
	a := Summarize([]PE{{10, nan, -4, 0, 1}, {-20, nan, 2, 0, 1}, {30, nan, 2, 0, 1}})
	if a.N[TTFTMean] != 3 || !near(a.MAPE[TTFTMean], 20) || !near(a.MedianAPE[TTFTMean], 20) || !near(a.MPE[TTFTMean], 20.0/3) {
		t.Fatalf("TTFT mean: %+v", a)
	}
	if a.N[TTFTP90] != 0 || !math.IsNaN(a.MAPE[TTFTP90]) {
		t.Fatalf("a metric nobody has: n %d, MAPE %v", a.N[TTFTP90], a.MAPE[TTFTP90])
	}
	if !near(a.MPE[E2EMean], 0) || !near(a.MAPE[E2EMean], 8.0/3) {
		t.Fatalf("E2E mean: MAPE %v MPE %v", a.MAPE[E2EMean], a.MPE[E2EMean])
	}
}
