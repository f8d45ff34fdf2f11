package expect

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"switchyard/sim/stats"
)

// Verdict is one expectation checked against a run.
type Verdict struct {
	Title string `json:"expectation"`
	OK    bool   `json:"ok"`
	// Got is the observed figure, as the bound is written ("312ms").
	Got string `json:"got"`
	// Detail says what the figure was computed over, or why the
	// expectation failed.
	Detail string `json:"detail"`
	// Skipped says why the run could not observe what the expectation
	// bounds; a skipped verdict neither holds nor fails.
	Skipped string `json:"skipped,omitempty"`
}

// Message is the verdict in one line, naming the expectation.
func (v Verdict) Message() string {
	state := "holds"
	switch {
	case v.Skipped != "":
		return fmt.Sprintf("expectation %q skipped: %s", v.Title, v.Skipped)
	case !v.OK:
		state = "FAILED"
	}
	return fmt.Sprintf("expectation %q %s: got %s (%s)", v.Title, state, v.Got, v.Detail)
}

// Evaluate checks every expectation against the evidence, in order.
func Evaluate(exps []Expectation, ev *Evidence) []Verdict {
	out := make([]Verdict, 0, len(exps))
	for _, e := range exps {
		out = append(out, evaluate(e, ev))
	}
	return out
}

// Failed returns the verdicts that did not hold (skipped ones aside).
func Failed(vs []Verdict) []Verdict {
	var out []Verdict
	for _, v := range vs {
		if !v.OK && v.Skipped == "" {
			out = append(out, v)
		}
	}
	return out
}

func span(from, to *Value) (time.Duration, time.Duration) {
	lo, hi := time.Duration(0), time.Duration(math.MaxInt64)
	if from != nil {
		lo = from.Duration()
	}
	if to != nil {
		hi = to.Duration()
	}
	return lo, hi
}

func evaluate(e Expectation, ev *Evidence) Verdict {
	v := Verdict{Title: e.Title()}
	switch {
	case e.Metric != "" && ev.Unobserved[e.Metric] != "":
		v.Got, v.Skipped = "nothing", ev.Unobserved[e.Metric]
	case e.Metric != "":
		lo, hi := span(e.From, e.To)
		got, over, ok := metric(e.Metric, ev, lo, hi)
		if !ok {
			v.Got, v.Detail = "nothing", over
			return v
		}
		v.OK = within(got, e.Min, e.Max)
		v.Got, v.Detail = format(got, Metrics[e.Metric]), over
	case e.Counter != "":
		lo, hi := span(e.From, e.To)
		n := ev.Count(e.Counter, lo, hi)
		v.OK = within(float64(n), e.Min, e.Max)
		v.Got, v.Detail = fmt.Sprint(n), "times counted"
	case e.NoPicks != nil:
		n, first := picksOf(ev, *e.NoPicks)
		v.OK, v.Got = n == 0, fmt.Sprintf("%d picks", n)
		v.Detail = "none pinned the worker"
		if n > 0 {
			v.Detail = fmt.Sprintf("first at %s (request %d)", first.At, first.RequestID)
		}
	case e.Picks != nil:
		n, _ := picksOf(ev, *e.Picks)
		v.OK, v.Got = n >= max(e.Picks.Min, 1), fmt.Sprintf("%d picks", n)
		v.Detail = fmt.Sprintf("of %d picks in the window", picksIn(ev, *e.Picks))
	case e.NoLost:
		lost := lostRequests(ev)
		v.OK, v.Got = len(lost) == 0, fmt.Sprintf("%d lost", len(lost))
		v.Detail = fmt.Sprintf("of %d accepted", len(ev.Requests))
		if len(lost) > 0 {
			ids := make([]string, 0, 5)
			for _, r := range lost[:min(len(lost), 5)] {
				ids = append(ids, fmt.Sprint(r.ID))
			}
			v.Detail += "; first: " + strings.Join(ids, ", ")
		}
	}
	return v
}

func within(got float64, lo, hi *Value) bool {
	if lo != nil && got < lo.Num {
		return false
	}
	if hi != nil && got > hi.Num {
		return false
	}
	return true
}

func format(got float64, u Unit) string {
	switch u {
	case Latency:
		return time.Duration(got).Round(10 * time.Microsecond).String()
	case Ratio:
		return fmt.Sprintf("%.4f", got)
	}
	return fmt.Sprint(int64(got))
}

// lostRequests are those accepted that never got an answer: no outcome, or
// still waiting when the run ended.
func lostRequests(ev *Evidence) []Request {
	var out []Request
	for _, r := range ev.Requests {
		if r.Status == "" || r.Status == "cancelled" {
			out = append(out, r)
		}
	}
	return out
}

func picksIn(ev *Evidence, r PickRule) int {
	lo, hi := span(r.From, r.To)
	n := 0
	for _, p := range ev.Picks {
		if p.At >= lo && p.At < hi {
			n++
		}
	}
	return n
}

func picksOf(ev *Evidence, r PickRule) (int, Pick) {
	lo, hi := span(r.From, r.To)
	n, first := 0, Pick{}
	for _, p := range ev.Picks {
		if p.At < lo || p.At >= hi || (p.Decode != r.Worker && p.Prefill != r.Worker) {
			continue
		}
		if n == 0 {
			first = p
		}
		n++
	}
	return n, first
}

// metric computes a figure over the requests that arrived in [lo, hi); ok
// is false when the figure is undefined there (over then says why).
func metric(name string, ev *Evidence, lo, hi time.Duration) (got float64, over string, ok bool) {
	var in []Request
	for _, r := range ev.Requests {
		if r.Arrival >= lo && r.Arrival < hi {
			in = append(in, r)
		}
	}
	byStatus := func(s string) float64 {
		n := 0
		for _, r := range in {
			if r.Status == s {
				n++
			}
		}
		return float64(n)
	}
	served := byStatus("ok")
	switch name {
	case "requests":
		return float64(len(in)), "requests in the window", true
	case "served", "failed", "refused", "rejected":
		status := map[string]string{"served": "ok"}[name]
		if status == "" {
			status = name
		}
		return byStatus(status), fmt.Sprintf("of %d requests", len(in)), true
	case "lost":
		n := 0
		for _, r := range in {
			if r.Status == "" || r.Status == "cancelled" {
				n++
			}
		}
		return float64(n), fmt.Sprintf("of %d requests", len(in)), true
	}
	if len(in) == 0 {
		return 0, "no request arrived in the window", false
	}
	switch name {
	case "served_ratio":
		return served / float64(len(in)), fmt.Sprintf("%d of %d requests", int(served), len(in)), true
	case "goodput":
		good := 0
		for _, r := range in {
			if r.Status == "ok" && (ev.SLO.TTFT == 0 || r.TTFT <= ev.SLO.TTFT) && (ev.SLO.ITL == 0 || r.ITL <= ev.SLO.ITL) {
				good++
			}
		}
		return float64(good) / float64(len(in)), fmt.Sprintf("%d of %d requests within the SLO", good, len(in)), true
	}
	if served == 0 {
		return 0, fmt.Sprintf("none of %d requests was served", len(in)), false
	}
	if name == "cache_hit_ratio" {
		var prompt, cached int64
		for _, r := range in {
			if r.Status == "ok" {
				prompt += int64(r.PromptTokens)
				cached += int64(r.CachedTokens)
			}
		}
		if prompt == 0 {
			return 0, "no prompt tokens served", false
		}
		return float64(cached) / float64(prompt), fmt.Sprintf("%d of %d prompt tokens", cached, prompt), true
	}
	family, stat, _ := strings.Cut(name, "_")
	var xs []float64
	for _, r := range in {
		if r.Status != "ok" {
			continue
		}
		d := map[string]time.Duration{"ttft": r.TTFT, "e2e": r.E2E, "itl": r.ITL}[family]
		if family == "itl" && d == 0 {
			continue // fewer than two output tokens
		}
		xs = append(xs, float64(d))
	}
	if len(xs) == 0 {
		return 0, "no served request has a " + family, false
	}
	slices.Sort(xs)
	over = fmt.Sprintf("over %d served requests", len(xs))
	if stat == "mean" {
		sum := 0.0
		for _, x := range xs {
			sum += x
		}
		return sum / float64(len(xs)), over, true
	}
	p := map[string]float64{"p50": 50, "p90": 90, "p99": 99}[stat]
	return stats.Percentile(xs, p), over, true
}
