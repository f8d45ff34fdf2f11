package validate

import (
	"math"
	"slices"

	"switchyard/internal/groundtruth"
)

// Metric is one scored statistic.
type Metric int

// The scored metrics, in table order.
const (
	TTFTMean Metric = iota
	TTFTP90
	E2EMean
	E2EP90
	TPOT
	NumMetrics
)

var metricNames = [NumMetrics]string{"TTFT mean", "TTFT p90", "E2E mean", "E2E p90", "TPOT"}

func (m Metric) String() string { return metricNames[m] }

// PE holds signed percentage errors, (predicted − measured)/measured × 100,
// one per metric; NaN where either side lacks the figure. APE is its
// absolute value.
type PE [NumMetrics]float64

// Errors are a prediction's errors against an experiment's measurements,
// per stage and at the summary level (the level experiments are compared at).
type Errors struct {
	Stages  []PE
	Summary PE
}

// figures are the five scored numbers of one stage, from any source.
type figures [NumMetrics]*float64

func measuredFigures(s groundtruth.MeasuredStage) figures {
	return figures{s.TTFT.Mean, s.TTFT.P90, s.E2E.Mean, s.E2E.P90, s.TPOTTrueMs}
}

func predictedFigures(s StageStats) figures {
	return figures{&s.TTFT.Mean, &s.TTFT.P90, &s.E2E.Mean, &s.E2E.P90, &s.TPOTMs}
}

// baselineFigures compares a baseline's own per-token time (itl_ms_mean)
// with tpot_true_ms, as the data's README says.
func baselineFigures(s groundtruth.BaselineStage) figures {
	return figures{s.TTFT.Mean, s.TTFT.P90, s.E2E.Mean, s.E2E.P90, s.ITLMeanMs}
}

func percentErrors(pred, meas figures) PE {
	var pe PE
	for m := range NumMetrics {
		pe[m] = math.NaN()
		if p, v := pred[m], meas[m]; p != nil && v != nil && *v > 0 {
			pe[m] = (*p - *v) / *v * 100
		}
	}
	return pe
}

// measuredSummary is the experiment's pooled figures: its summary, or its
// only stage.
func measuredSummary(exp *groundtruth.Experiment) *groundtruth.MeasuredStage {
	if exp.Measured.Summary != nil {
		return exp.Measured.Summary
	}
	if len(exp.Measured.Stages) == 1 {
		return &exp.Measured.Stages[0]
	}
	return nil
}

// Score compares pred with exp's measurements, stage by stage (matched by
// index) and at the summary level.
func Score(exp *groundtruth.Experiment, pred Prediction) Errors {
	var e Errors
	for _, ms := range exp.Measured.Stages {
		pe := percentErrors(figures{}, measuredFigures(ms))
		for _, ps := range pred.Stages {
			if ps.Index == ms.Index {
				pe = percentErrors(predictedFigures(ps), measuredFigures(ms))
			}
		}
		e.Stages = append(e.Stages, pe)
	}
	e.Summary = percentErrors(figures{}, figures{})
	if ms := measuredSummary(exp); ms != nil {
		e.Summary = percentErrors(predictedFigures(pred.Summary), measuredFigures(*ms))
	}
	return e
}

// ScoreBaseline compares a stored baseline's predictions with exp's
// measurements, as Score does for ours; ok is false when exp has no
// baseline of that name.
func ScoreBaseline(exp *groundtruth.Experiment, name string) (Errors, bool) {
	b, ok := exp.Baselines[name]
	if !ok {
		return Errors{}, false
	}
	var e Errors
	for _, ms := range exp.Measured.Stages {
		pe := percentErrors(figures{}, measuredFigures(ms))
		for _, bs := range b.Stages {
			if bs.Index == ms.Index {
				pe = percentErrors(baselineFigures(bs), measuredFigures(ms))
			}
		}
		e.Stages = append(e.Stages, pe)
	}
	e.Summary = percentErrors(figures{}, figures{})
	ms := measuredSummary(exp)
	switch {
	case ms != nil && b.Summary != nil:
		e.Summary = percentErrors(baselineFigures(*b.Summary), measuredFigures(*ms))
	case ms != nil && len(b.Stages) == 1 && len(exp.Measured.Stages) == 1:
		e.Summary = percentErrors(baselineFigures(b.Stages[0]), measuredFigures(*ms))
	}
	return e, true
}

// Aggregate summarises summary-level errors over experiments, per metric:
// N experiments with the figure, MAPE (mean APE), median APE and MPE (mean
// signed error, the bias). Metrics no experiment has are NaN.
type Aggregate struct {
	N                    [NumMetrics]int
	MAPE, MedianAPE, MPE [NumMetrics]float64
}

// Summarize aggregates per-experiment summary errors.
func Summarize(errs []PE) Aggregate {
	var a Aggregate
	for m := range NumMetrics {
		var abs []float64
		signed := 0.0
		for _, pe := range errs {
			if !math.IsNaN(pe[m]) {
				abs = append(abs, math.Abs(pe[m]))
				signed += pe[m]
			}
		}
		a.N[m] = len(abs)
		a.MAPE[m], a.MedianAPE[m], a.MPE[m] = math.NaN(), math.NaN(), math.NaN()
		if len(abs) == 0 {
			continue
		}
		sum := 0.0
		for _, x := range abs {
			sum += x
		}
		slices.Sort(abs)
		a.MAPE[m] = sum / float64(len(abs))
		a.MedianAPE[m] = percentile(abs, 50)
		a.MPE[m] = signed / float64(len(abs))
	}
	return a
}
