package tune

import (
	"fmt"
	"strings"

	"switchyard/sim/stats"
)

// Objective is the figure of a run the search optimises.
type Objective string

// The objectives, named as --objective takes them.
const (
	TTFTP90       Objective = "ttft_p90"
	TTFTP50       Objective = "ttft_p50"
	E2EP90        Objective = "e2e_p90"
	Goodput       Objective = "goodput"
	CacheHitRatio Objective = "cache_hit_ratio"
)

// Objectives lists every objective, the default first.
func Objectives() []Objective { return []Objective{TTFTP90, TTFTP50, E2EP90, Goodput, CacheHitRatio} }

// ParseObjective reads an objective's name.
func ParseObjective(s string) (Objective, error) {
	for _, o := range Objectives() {
		if string(o) == s {
			return o, nil
		}
	}
	names := make([]string, 0, 5)
	for _, o := range Objectives() {
		names = append(names, string(o))
	}
	return "", fmt.Errorf("unknown objective %q (known: %s)", s, strings.Join(names, ", "))
}

// Value is the objective's figure of a run.
func (o Objective) Value(s stats.Summary) float64 {
	switch o {
	case TTFTP50:
		return s.TTFT.P50
	case E2EP90:
		return s.E2E.P90
	case Goodput:
		return s.GoodputRatio
	case CacheHitRatio:
		return s.HitRatio
	}
	return s.TTFT.P90
}

// LowerIsBetter says which way the objective improves.
func (o Objective) LowerIsBetter() bool { return o != Goodput && o != CacheHitRatio }

// Unit is the figure's unit, for people.
func (o Objective) Unit() string {
	if o.LowerIsBetter() {
		return "ms"
	}
	return "ratio"
}

// Label describes the figure, for charts and tables.
func (o Objective) Label() string {
	switch o {
	case TTFTP50:
		return "TTFT p50 (ms)"
	case E2EP90:
		return "E2E p90 (ms)"
	case Goodput:
		return "goodput ratio"
	case CacheHitRatio:
		return "hit ratio"
	}
	return "TTFT p90 (ms)"
}

// NeedsSLO says whether the figure depends on the SLO bounds.
func (o Objective) NeedsSLO() bool { return o == Goodput }

// guardsFailures says whether a setting that fails more requests than the
// current one is ranked below every one that does not: latency percentiles
// and the hit ratio leave failed requests out and could reward failing
// them, goodput already counts them.
func (o Objective) guardsFailures() bool { return o != Goodput }
