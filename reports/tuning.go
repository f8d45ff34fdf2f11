package reports

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"

	"switchyard/sim/stats"
)

// Tuning is a knob search's account (switchyard tune), shown before the comparison of the
// current and the tuned settings. Points are in evaluation order.
type Tuning struct {
	Objective     string // its name, e.g. "ttft_p90"
	Label         string // the figure for people, e.g. "TTFT p90 (ms)"
	LowerIsBetter bool
	Budget        int
	Converged     bool
	Points        []TunePoint
	// Current and Tuned index Points.
	Current, Tuned int
	// CurrentRun and TunedRun name the comparison's runs of those two points.
	CurrentRun, TunedRun string
}

// TunePoint is one evaluated setting and its figure.
type TunePoint struct {
	PrefillLoadScale, OverlapScoreCredit, RouterTemperature, DecodeActiveRequestWeight float64
	TrackActiveBlocks, TrackPrefillTokens                                              bool
	Phase                                                                              string
	Value                                                                              float64
}

func (t *Tuning) ok() bool {
	return t != nil && t.Current >= 0 && t.Current < len(t.Points) && t.Tuned >= 0 && t.Tuned < len(t.Points)
}

// Describe is the point's knobs in one line.
func (p TunePoint) Describe() string {
	s := fmt.Sprintf("prefill_load_scale %s, overlap_score_credit %s, router_temperature %s, decode_active_request_weight %s",
		g(p.PrefillLoadScale), g(p.OverlapScoreCredit), g(p.RouterTemperature), g(p.DecodeActiveRequestWeight))
	var track []string
	if p.TrackActiveBlocks {
		track = append(track, "active blocks")
	}
	if p.TrackPrefillTokens {
		track = append(track, "prefill tokens")
	}
	if len(track) == 0 {
		return s + ", no tracking"
	}
	return s + ", tracking " + joinAnd(track)
}

func g(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

func joinAnd(s []string) string {
	if len(s) == 2 {
		return s[0] + " and " + s[1]
	}
	return s[0]
}

// gainRows are the figures the expected gain is told in: the objective's and the usual ones.
func gainRows() []struct {
	name  string
	lower bool
	get   func(stats.Summary) float64
	ms    bool
} {
	return []struct {
		name  string
		lower bool
		get   func(stats.Summary) float64
		ms    bool
	}{
		{"TTFT p50", true, func(s stats.Summary) float64 { return s.TTFT.P50 }, true},
		{"TTFT p90", true, func(s stats.Summary) float64 { return s.TTFT.P90 }, true},
		{"TTFT p99", true, func(s stats.Summary) float64 { return s.TTFT.P99 }, true},
		{"E2E p90", true, func(s stats.Summary) float64 { return s.E2E.P90 }, true},
		{"goodput ratio", false, func(s stats.Summary) float64 { return s.GoodputRatio }, false},
		{"hit ratio", false, func(s stats.Summary) float64 { return s.HitRatio }, false},
	}
}

// change is b relative to a as a signed percentage, "" when a is 0.
func change(a, b float64) string {
	if a == 0 || !finite(a) || !finite(b) {
		return ""
	}
	return fmt.Sprintf("%+.1f %%", (b-a)/a*100)
}

func (c Comparison) run(name string) (stats.Summary, bool) {
	for _, r := range c.Pickers {
		if r.Name == name {
			return r.Summary, true
		}
	}
	return stats.Summary{}, false
}

// tuningMarkdown is summary.md's account of the search.
func tuningMarkdown(b *bytes.Buffer, c Comparison) {
	t := c.Tuning
	if !t.ok() {
		return
	}
	cur, best := t.Points[t.Current], t.Points[t.Tuned]
	fmt.Fprintf(b, "## Tuning: %s\n\n", mdText(t.Objective))
	fmt.Fprintf(b, "- Evaluated: %d settings of a budget of %d (%s)\n", len(t.Points), t.Budget, convergedText(t))
	fmt.Fprintf(b, "- %s: %s with the current settings, %s tuned\n", mdText(t.Label), g(cur.Value), g(best.Value))
	fmt.Fprintf(b, "- Current: %s\n- Tuned: %s\n\n", mdText(cur.Describe()), mdText(best.Describe()))
	cs, okC := c.run(t.CurrentRun)
	ts, okT := c.run(t.TunedRun)
	if !okC || !okT {
		return
	}
	fmt.Fprintf(b, "| figure | %s | %s | change |\n|---|--:|--:|--:|\n", mdText(t.CurrentRun), mdText(t.TunedRun))
	for _, r := range gainRows() {
		f := fmtRatio
		if r.ms {
			f = fmtMs
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", r.name, f(r.get(cs)), f(r.get(ts)), change(r.get(cs), r.get(ts)))
	}
	b.WriteString("\n")
}

func convergedText(t *Tuning) string {
	if t.Converged {
		return "converged: no neighbour of the tuned point was better at the finest step"
	}
	return "the budget ran out before the search converged"
}

// tuningHTML is index.html's section on the search: the trade-off chart, the search's progress
// and the expected gain.
func tuningHTML(b *bytes.Buffer, c Comparison) {
	t := c.Tuning
	if !t.ok() {
		return
	}
	cur, best := t.Points[t.Current], t.Points[t.Tuned]
	b.WriteString("<h2 id=\"tuning\">Tuning</h2>\n")
	fmt.Fprintf(b, "<p class=\"note\">%d settings simulated on the same workload (budget %d; %s). %s: <b>%s</b> with the current settings, <b>%s</b> tuned.</p>\n",
		len(t.Points), t.Budget, esc(convergedText(t)), esc(t.Label), esc(g(cur.Value)), esc(g(best.Value)))
	fmt.Fprintf(b, "<p class=\"note\">Current: %s.<br/>Tuned: %s.</p>\n", esc(cur.Describe()), esc(best.Describe()))
	b.WriteString("<div class=\"charts\">\n")
	b.WriteString(tradeoffChart(t).SVG())
	b.WriteString("\n")
	b.WriteString(progressChart(t).SVG())
	b.WriteString("\n</div>\n")
	cs, okC := c.run(t.CurrentRun)
	ts, okT := c.run(t.TunedRun)
	if !okC || !okT {
		return
	}
	fmt.Fprintf(b, "<div class=\"scroll\"><table><thead><tr><th class=\"name\">figure</th><th>%s</th><th>%s</th><th>change</th></tr></thead><tbody>\n",
		esc(t.CurrentRun), esc(t.TunedRun))
	for _, r := range gainRows() {
		f := fmtRatio
		if r.ms {
			f = fmtMs
		}
		a, v := r.get(cs), r.get(ts)
		cls := ""
		if (r.lower && v < a) || (!r.lower && v > a) {
			cls = " class=\"best\""
		}
		fmt.Fprintf(b, "<tr><td class=\"name\">%s</td><td>%s</td><td%s>%s</td><td>%s</td></tr>\n", esc(r.name), esc(f(a)), cls, esc(f(v)), esc(change(a, v)))
	}
	b.WriteString("</tbody></table></div>\n")
}

// tradeoffChart plots every evaluated setting's figure against its prefill_load_scale, one
// colour per overlap_score_credit, the current and tuned settings on top.
func tradeoffChart(t *Tuning) LineChart {
	var credits []float64
	for _, p := range t.Points {
		if !slices.Contains(credits, p.OverlapScoreCredit) {
			credits = append(credits, p.OverlapScoreCredit)
		}
	}
	slices.Sort(credits)
	slices.Reverse(credits)
	var lines []Line
	for i, cr := range credits {
		l := Line{Name: "credit " + g(cr), Color: Color(i + 2), Markers: true}
		for j, p := range t.Points {
			if p.OverlapScoreCredit == cr && j != t.Current && j != t.Tuned {
				l.Points = append(l.Points, stats.Point{X: p.PrefillLoadScale, Y: p.Value})
			}
		}
		lines = append(lines, l)
	}
	cur, best := t.Points[t.Current], t.Points[t.Tuned]
	lines = append(lines, Line{Name: "current", Color: Color(1), Markers: true, Points: []stats.Point{{X: cur.PrefillLoadScale, Y: cur.Value}}},
		Line{Name: "tuned", Color: Color(0), Markers: true, Points: []stats.Point{{X: best.PrefillLoadScale, Y: best.Value}}})
	return LineChart{Title: t.Label + " by prefill_load_scale", XLabel: "prefill_load_scale", YLabel: t.Label, Lines: lines, LogX: true}
}

// progressChart is every evaluation's figure in evaluation order, with the best so far.
func progressChart(t *Tuning) LineChart {
	all := Line{Name: "evaluated", Color: Color(2), Markers: true}
	best := Line{Name: "best so far", Color: Color(0), Step: true}
	for i, p := range t.Points {
		x := float64(i + 1)
		all.Points = append(all.Points, stats.Point{X: x, Y: p.Value})
		y := p.Value
		if n := len(best.Points); n > 0 {
			prev := best.Points[n-1].Y
			if (t.LowerIsBetter && prev < y) || (!t.LowerIsBetter && prev > y) {
				y = prev
			}
		}
		best.Points = append(best.Points, stats.Point{X: x, Y: y})
	}
	return LineChart{Title: "Search progress", XLabel: "evaluation", YLabel: t.Label, Lines: []Line{all, best}, XFromData: true}
}
