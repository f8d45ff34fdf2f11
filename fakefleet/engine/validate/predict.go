package validate

import (
	"math"
	"slices"
	"time"

	"switchyard/internal/groundtruth"
)

// Prediction is the simulated counterpart of an experiment's measured
// statistics, in the shape the data's README asks predictions to be
// written in.
type Prediction struct {
	Stages  []StageStats `json:"stages"`
	Summary StageStats   `json:"summary"`
	// Requests are per-request timings, for per-request sets only.
	Requests []RequestTiming `json:"requests,omitempty"`
}

// StageStats are one stage's statistics over its completed requests.
type StageStats struct {
	Index     int       `json:"index"`
	Window    string    `json:"window,omitempty"`
	Completed int       `json:"completed"`
	Failed    int       `json:"failed"`
	TTFT      Quantiles `json:"ttft_ms"`
	E2E       Quantiles `json:"e2e_ms"`
	// TPOTMs is the mean over requests of (E2E − TTFT)/(generated − 1).
	TPOTMs float64 `json:"tpot_ms"`
}

// Quantiles summarise a latency distribution in milliseconds.
type Quantiles struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
}

// RequestTiming is one request's simulated timing; a failed one has none.
type RequestTiming struct {
	ID     string  `json:"id"`
	TTFTMs float64 `json:"ttft_ms"`
	E2EMs  float64 `json:"e2e_ms"`
	Failed bool    `json:"failed,omitempty"`
}

// timing is what a request's statistics are made of.
type timing struct {
	ttft, e2e float64 // ms
	tokens    int
	failed    bool
}

func timingOf(r *simRequest, overhead time.Duration) timing {
	if r.failed || r.first.IsZero() {
		return timing{failed: true}
	}
	return timing{ttft: msOf(r.first.Sub(r.sent) + overhead), e2e: msOf(r.done.Sub(r.sent) + overhead), tokens: r.maxTokens}
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sharedPrefixPrediction gives each inference-perf stage its own requests'
// statistics and pools them for the summary; latencies are client-side,
// with the fixed overhead added.
func sharedPrefixPrediction(exp *groundtruth.Experiment, reqs []*simRequest, overhead time.Duration) Prediction {
	per := make([][]timing, len(exp.Workload.Stages))
	var all []timing
	for _, r := range reqs {
		t := timingOf(r, overhead)
		per[r.stage] = append(per[r.stage], t)
		all = append(all, t)
	}
	p := Prediction{}
	for i, ts := range per {
		p.Stages = append(p.Stages, statsOf(exp.Workload.Stages[i].Index, "", ts))
	}
	p.Summary = statsOf(0, "", all)
	return p
}

// tracePrediction times requests from their engine arrival (D: engine queue
// entry; E: server arrival, the HTTP path excluded), lists every request,
// and computes each measured stage's statistics over its window.
func tracePrediction(exp *groundtruth.Experiment, reqs []*simRequest) (Prediction, error) {
	byID := make(map[string]timing, len(reqs))
	p := Prediction{}
	for _, r := range reqs {
		t := timingOf(r, 0)
		byID[r.id] = t
	}
	for _, r := range exp.Requests {
		t := byID[r.ID]
		p.Requests = append(p.Requests, RequestTiming{ID: r.ID, TTFTMs: t.ttft, E2EMs: t.e2e, Failed: t.failed})
	}
	stages := exp.Measured.Stages
	if len(stages) == 0 {
		stages = []groundtruth.MeasuredStage{{Window: "all requests"}}
	}
	for _, st := range stages {
		s, err := windowStats(exp, byID, st.Index, st.Window)
		if err != nil {
			return Prediction{}, err
		}
		p.Stages = append(p.Stages, s)
	}
	p.Summary = p.Stages[0]
	if sum := exp.Measured.Summary; sum != nil {
		s, err := windowStats(exp, byID, 0, sum.Window)
		if err != nil {
			return Prediction{}, err
		}
		p.Summary = s
	}
	return p, nil
}

func windowStats(exp *groundtruth.Experiment, byID map[string]timing, index int, win string) (StageStats, error) {
	in, err := parseWindow(win)
	if err != nil {
		return StageStats{}, err
	}
	var ts []timing
	for _, r := range exp.Requests {
		if in(r.ArrivalS) {
			ts = append(ts, byID[r.ID])
		}
	}
	return statsOf(index, win, ts), nil
}

// statsOf summarises completed requests; percentiles interpolate linearly
// between order statistics, as numpy's default (inference-perf) does.
func statsOf(index int, win string, ts []timing) StageStats {
	s := StageStats{Index: index, Window: win}
	var ttft, e2e []float64
	tpotSum, tpotN := 0.0, 0
	for _, t := range ts {
		if t.failed {
			s.Failed++
			continue
		}
		s.Completed++
		ttft, e2e = append(ttft, t.ttft), append(e2e, t.e2e)
		if t.tokens > 1 {
			tpotSum += (t.e2e - t.ttft) / float64(t.tokens-1)
			tpotN++
		}
	}
	s.TTFT, s.E2E = quantiles(ttft), quantiles(e2e)
	if tpotN > 0 {
		s.TPOTMs = tpotSum / float64(tpotN)
	}
	return s
}

func quantiles(v []float64) Quantiles {
	if len(v) == 0 {
		return Quantiles{}
	}
	slices.Sort(v)
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return Quantiles{Mean: sum / float64(len(v)), P50: percentile(v, 50), P90: percentile(v, 90), P99: percentile(v, 99)}
}

// percentile reads sorted v at q percent with linear interpolation.
func percentile(v []float64, q float64) float64 {
	pos := q / 100 * float64(len(v)-1)
	lo := int(math.Floor(pos))
	if lo >= len(v)-1 {
		return v[len(v)-1]
	}
	return v[lo] + (v[lo+1]-v[lo])*(pos-float64(lo))
}
