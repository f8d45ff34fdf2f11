// Package expect is what a scenario promises about its run: latency and
// goodput bounds, selection properties around faults, counters of what the
// routing core refused or repaired, and that no accepted request is lost.
// Expectations are checked against Evidence, which a Collector builds from
// the core's outputs; the same outputs come from the simulator and from a
// live router's recording, so one scenario is judged the same way in both
// modes. Everything here is a pure function of its inputs.
package expect

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Expectation is one promise. Exactly one of Metric, Counter, NoPicks,
// Picks and NoLost is set.
type Expectation struct {
	// Name labels the expectation in reports and JUnit; left out it is
	// written from the rule itself ("ttft_p90 <= 250ms").
	Name string `yaml:"name,omitempty"`

	// Metric bounds a figure over the requests that arrived in the window
	// [From, To) (the whole run when left out): see Metrics.
	Metric string `yaml:"metric,omitempty"`
	// Counter bounds a count of what the core applied, refused or
	// repaired (see docs/scenarios.md for the names).
	Counter string `yaml:"counter,omitempty"`
	// Min and Max bound the metric or counter: a duration ("250ms") for a
	// latency, a number otherwise.
	Min *Value `yaml:"min,omitempty"`
	Max *Value `yaml:"max,omitempty"`
	// From and To window a metric by arrival time and a counter by the
	// time it was counted.
	From *Value `yaml:"from,omitempty"`
	To   *Value `yaml:"to,omitempty"`

	// NoPicks: no request is pinned to the worker in the window.
	NoPicks *PickRule `yaml:"no_picks,omitempty"`
	// Picks: at least Min requests are pinned to the worker in the window.
	Picks *PickRule `yaml:"picks,omitempty"`
	// NoLost: every request the router accepted ended with an answer,
	// served or a clear error; none was still unanswered when the run
	// ended.
	NoLost bool `yaml:"no_lost,omitempty"`
}

// PickRule is a selection property of one worker over a window of pick
// times.
type PickRule struct {
	// Worker indexes the fleet in declaration order, as faults do.
	Worker int    `yaml:"worker"`
	From   *Value `yaml:"from,omitempty"`
	To     *Value `yaml:"to,omitempty"`
	// Min (picks only) is the fewest picks that satisfy the rule; 0 is 1.
	Min int `yaml:"min,omitempty"`
}

// Value is a bound written either as a Go duration ("250ms", "12s") or
// as a plain number.
type Value struct {
	// Num is the number, or the duration in nanoseconds.
	Num        float64
	IsDuration bool
}

// UnmarshalYAML reads a duration string or a number.
func (v *Value) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a number or a duration", n.Line)
	}
	// A plain number first: time.ParseDuration also accepts a bare "0",
	// which would make "max: 0" a duration.
	if f, err := strconv.ParseFloat(n.Value, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("line %d: %q is not a finite number", n.Line, n.Value)
		}
		*v = Value{Num: f}
		return nil
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is neither a number nor a duration", n.Line, n.Value)
	}
	*v = Value{Num: float64(d), IsDuration: true}
	return nil
}

// MarshalYAML writes the value as it was read.
func (v Value) MarshalYAML() (any, error) { return v.String(), nil }

// Duration is the value as a duration (a number counts as seconds).
func (v Value) Duration() time.Duration {
	if v.IsDuration {
		return time.Duration(v.Num)
	}
	return time.Duration(v.Num * float64(time.Second))
}

func (v Value) String() string {
	if v.IsDuration {
		return time.Duration(v.Num).String()
	}
	return strconv.FormatFloat(v.Num, 'g', -1, 64)
}

// Unit is what a metric measures, which decides how its bound is written.
type Unit int

const (
	Latency Unit = iota // a duration
	Ratio               // a fraction in [0, 1]
	Count               // a number of requests
)

// Metrics are the figures a Metric expectation may bound.
var Metrics = map[string]Unit{
	"ttft_p50": Latency, "ttft_p90": Latency, "ttft_p99": Latency, "ttft_mean": Latency,
	"e2e_p50": Latency, "e2e_p90": Latency, "e2e_p99": Latency, "e2e_mean": Latency,
	"itl_p50": Latency, "itl_p90": Latency, "itl_p99": Latency, "itl_mean": Latency,
	// goodput: the fraction of the window's requests served within the
	// scenario's SLO; served_ratio: the fraction served at all.
	"goodput": Ratio, "served_ratio": Ratio, "cache_hit_ratio": Ratio,
	"requests": Count, "served": Count, "failed": Count, "refused": Count, "rejected": Count, "lost": Count,
}

// MetricNames lists Metrics sorted, for messages.
func MetricNames() []string {
	names := make([]string, 0, len(Metrics))
	for n := range Metrics {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Validate checks a scenario's expectations against its fleet size and
// returns every problem with its field path (expect[2].max: ...).
func Validate(exps []Expectation, workers int) []error {
	var errs []error
	for i, e := range exps {
		p := fmt.Sprintf("expect[%d]", i)
		bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(p+format, a...)) }
		kinds := 0
		for _, set := range []bool{e.Metric != "", e.Counter != "", e.NoPicks != nil, e.Picks != nil, e.NoLost} {
			if set {
				kinds++
			}
		}
		if kinds != 1 {
			bad(": want exactly one of metric, counter, no_picks, picks, no_lost (got %d)", kinds)
			continue
		}
		checkWindow := func(path string, from, to *Value) {
			for name, v := range map[string]*Value{"from": from, "to": to} {
				if v != nil && (v.Num < 0 || !v.IsDuration) {
					bad("%s.%s: must be a duration >= 0 (\"12s\"), got %s", path, name, v)
				}
			}
			if from != nil && to != nil && to.Num <= from.Num {
				bad("%s.to: must be after from", path)
			}
		}
		switch {
		case e.Metric != "":
			unit, ok := Metrics[e.Metric]
			if !ok {
				bad(".metric: unknown metric %q (known: %s)", e.Metric, strings.Join(MetricNames(), ", "))
				break
			}
			if e.Min == nil && e.Max == nil {
				bad(": metric %s needs min or max", e.Metric)
			}
			for name, v := range map[string]*Value{"min": e.Min, "max": e.Max} {
				switch {
				case v == nil:
				case unit == Latency && !v.IsDuration:
					bad(".%s: %s is a latency: write a duration such as 250ms, got %s", name, e.Metric, v)
				case unit != Latency && v.IsDuration:
					bad(".%s: %s is not a latency: write a number, got %s", name, e.Metric, v)
				case unit == Ratio && (v.Num < 0 || v.Num > 1):
					bad(".%s: %s is a fraction in [0, 1], got %s", name, e.Metric, v)
				case v.Num < 0:
					bad(".%s: must be >= 0", name)
				}
			}
			checkWindow("", e.From, e.To)
		case e.Counter != "":
			if !validCounterName(e.Counter) {
				bad(".counter: %q is not a counter name (family.name, e.g. load.gap, kv.gap, discovery.resync, selection.decode.kv_aware)", e.Counter)
			}
			if e.Min == nil && e.Max == nil {
				bad(": counter %s needs min or max", e.Counter)
			}
			for name, v := range map[string]*Value{"min": e.Min, "max": e.Max} {
				if v != nil && (v.IsDuration || v.Num < 0 || v.Num != math.Trunc(v.Num)) {
					bad(".%s: a counter bound is a whole number >= 0, got %s", name, v)
				}
			}
			checkWindow("", e.From, e.To)
		case e.NoLost:
			if e.From != nil || e.To != nil {
				bad(": no_lost takes no window: it holds for the whole run")
			}
		default:
			r, path := e.NoPicks, ".no_picks"
			if r == nil {
				r, path = e.Picks, ".picks"
			}
			if r.Worker < 0 || r.Worker >= workers {
				bad("%s.worker: no worker %d (the fleet has %d)", path, r.Worker, workers)
			}
			if r.Min < 0 || (e.NoPicks != nil && r.Min != 0) {
				bad("%s.min: only picks takes min, a count >= 1", path)
			}
			checkWindow(path, r.From, r.To)
		}
		if (e.NoPicks != nil || e.Picks != nil) && (e.From != nil || e.To != nil) {
			bad(": from and to belong inside no_picks and picks")
		}
		if (e.NoPicks != nil || e.Picks != nil || e.NoLost) && (e.Min != nil || e.Max != nil) {
			bad(": min and max bound a metric or a counter only")
		}
	}
	return errs
}

// validCounterName accepts family.name[.more] in lower case.
func validCounterName(s string) bool {
	if len(s) > 128 || !strings.Contains(s, ".") {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" {
			return false
		}
		for _, c := range part {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Title is the expectation's name, written from its rule when not given.
func (e Expectation) Title() string {
	if e.Name != "" {
		return e.Name
	}
	bounds := func(what string) string {
		var parts []string
		if e.Min != nil {
			parts = append(parts, what+" >= "+e.Min.String())
		}
		if e.Max != nil {
			parts = append(parts, what+" <= "+e.Max.String())
		}
		return strings.Join(parts, " and ") + window(e.From, e.To)
	}
	switch {
	case e.Metric != "":
		return bounds(e.Metric)
	case e.Counter != "":
		return bounds("counter " + e.Counter)
	case e.NoPicks != nil:
		return fmt.Sprintf("no picks of worker %d%s", e.NoPicks.Worker, window(e.NoPicks.From, e.NoPicks.To))
	case e.Picks != nil:
		return fmt.Sprintf("at least %d picks of worker %d%s", max(e.Picks.Min, 1), e.Picks.Worker, window(e.Picks.From, e.Picks.To))
	default:
		return "no accepted request lost"
	}
}

func window(from, to *Value) string {
	switch {
	case from != nil && to != nil:
		return fmt.Sprintf(" in [%s, %s)", from, to)
	case from != nil:
		return " from " + from.String()
	case to != nil:
		return " before " + to.String()
	}
	return ""
}
