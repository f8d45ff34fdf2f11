package reports

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"switchyard/sim/stats"
)

// sweepColumn is one figure of the merged table and charts.
type sweepColumn struct {
	head   string
	value  func(stats.Summary) float64
	format func(float64) string
}

var sweepColumns = []sweepColumn{
	{"requests", func(s stats.Summary) float64 { return float64(s.Requests) }, intFmt},
	{"failed", func(s stats.Summary) float64 { return float64(s.Failed) }, intFmt},
	{"TTFT p50 (ms)", func(s stats.Summary) float64 { return s.TTFT.P50 }, fmtMs},
	{"TTFT p90 (ms)", func(s stats.Summary) float64 { return s.TTFT.P90 }, fmtMs},
	{"TTFT p99 (ms)", func(s stats.Summary) float64 { return s.TTFT.P99 }, fmtMs},
	{"E2E p90 (ms)", func(s stats.Summary) float64 { return s.E2E.P90 }, fmtMs},
	{"goodput ratio", func(s stats.Summary) float64 { return s.GoodputRatio }, fmtRatio},
	{"hit ratio", func(s stats.Summary) float64 { return s.HitRatio }, fmtRatio},
}

// charted are the figures drawn against each swept dimension.
var charted = []sweepColumn{sweepColumns[3], sweepColumns[7]}

func (s *Sweep) contextLines() [][2]string {
	out := [][2]string{{"Command", "switchyard " + strings.Join(s.Command, " ")}}
	for _, d := range s.Dimensions {
		out = append(out, [2]string{"Swept " + d.Name, strings.Join(d.Values, ", ")})
	}
	out = append(out, [2]string{"Cells", fmt.Sprintf("%d of %d", len(s.Found), s.Cells)})
	if len(s.Missing) > 0 {
		out = append(out, [2]string{"Missing", joinInts(s.Missing)})
	}
	if s.Generated != "" {
		out = append(out, [2]string{"Generated", s.Generated})
	}
	return out
}

func joinInts(v []int) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ", ")
}

// SweepMarkdown is the merged summary.md: the sweep, the recommendation of a tune sweep, and
// one table row per cell and run.
func SweepMarkdown(s *Sweep) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n", mdText(s.title()))
	for _, kv := range s.contextLines() {
		fmt.Fprintf(&b, "- %s: %s\n", kv[0], mdText(kv[1]))
	}
	b.WriteString("\n")
	if t := s.Tuned; t != nil && t.Tuning.ok() {
		tu := t.Tuning
		cur, best := tu.Points[tu.Current], tu.Points[tu.Tuned]
		fmt.Fprintf(&b, "## Tuned from the grid: %s\n\n", mdText(tu.Objective))
		fmt.Fprintf(&b, "- %s: %s with the current settings (%s), %s with %s (%+.1f %%)\n", mdText(tu.Label), g(cur.Value),
			mdText(t.Current), g(best.Value), mdText(t.Tuned), t.Gain*100)
		fmt.Fprintf(&b, "- Tuned: %s\n- The grid only: refining around it needs a local `switchyard tune` run.\n\n", mdText(best.Describe()))
	}
	b.WriteString("| cell |")
	for _, d := range s.Dimensions {
		fmt.Fprintf(&b, " %s |", mdText(d.Name))
	}
	b.WriteString(" run |")
	for _, c := range sweepColumns {
		fmt.Fprintf(&b, " %s |", c.head)
	}
	b.WriteString("\n|--:|" + strings.Repeat("---|", len(s.Dimensions)+1) + strings.Repeat("--:|", len(sweepColumns)) + "\n")
	for _, c := range s.Found {
		for _, run := range c.Runs() {
			sum, _ := c.Summary(run)
			fmt.Fprintf(&b, "| %d |", c.Index())
			for _, co := range c.Coordinates() {
				fmt.Fprintf(&b, " %s |", mdText(co.Value))
			}
			fmt.Fprintf(&b, " %s |", mdText(run))
			for _, col := range sweepColumns {
				fmt.Fprintf(&b, " %s |", col.format(col.value(sum)))
			}
			b.WriteString("\n")
		}
	}
	if len(s.Missing) > 0 {
		fmt.Fprintf(&b, "\nMissing cells: %s.\n", joinInts(s.Missing))
	}
	b.WriteString("\nEach cell's own report (charts, definitions) is in its folder; the figures of every cell are in `summary.json`.\n")
	return b.Bytes()
}

// SweepHTML is the merged index.html: the table of every cell and run, and each charted figure
// against each swept dimension, one series per run.
func SweepHTML(s *Sweep) []byte {
	var b bytes.Buffer
	title := s.title()
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>")
	b.WriteString(`<meta name="viewport" content="width=device-width, initial-scale=1"/>`)
	fmt.Fprintf(&b, "<title>%s</title><style>%s</style></head>\n<body><main>\n", esc(title), css)
	fmt.Fprintf(&b, "<h1>%s</h1>\n<p class=\"meta\">", esc(title))
	for _, kv := range s.contextLines() {
		fmt.Fprintf(&b, "<span><b>%s</b> %s</span> ", esc(kv[0]), esc(kv[1]))
	}
	b.WriteString("</p>\n")
	if t := s.Tuned; t != nil && t.Tuning.ok() {
		tu := t.Tuning
		cur, best := tu.Points[tu.Current], tu.Points[tu.Tuned]
		b.WriteString("<h2 id=\"tuned\">Tuned from the grid</h2>\n")
		fmt.Fprintf(&b, "<p class=\"note\">%s: <b>%s</b> with the current settings (%s), <b>%s</b> with %s (%+.1f %%). Tuned: %s. "+
			"This is the grid alone; refining around it needs a local <code>switchyard tune</code> run.</p>\n",
			esc(tu.Label), esc(g(cur.Value)), esc(t.Current), esc(g(best.Value)), esc(t.Tuned), t.Gain*100, esc(best.Describe()))
		b.WriteString("<div class=\"charts\">\n")
		b.WriteString(tradeoffChart(tu).SVG())
		b.WriteString("\n</div>\n")
	}

	runs := s.runs()
	b.WriteString("<h2 id=\"charts\">Across the grid</h2>\n<p class=\"note\">Each figure against each swept dimension, one line (or bar) per run, averaged over the other dimensions' cells.</p>\n<div class=\"charts\">\n")
	drawn := 0
	for di, d := range s.Dimensions {
		if len(d.Values) < 2 {
			continue
		}
		for _, col := range charted {
			b.WriteString(s.dimensionChart(di, col, runs))
			b.WriteString("\n")
			drawn++
		}
	}
	if drawn == 0 {
		b.WriteString("<p class=\"note\">No dimension has two values: nothing to chart.</p>\n")
	}
	b.WriteString("</div>\n")

	b.WriteString("<h2 id=\"cells\">Cells</h2>\n<div class=\"scroll\"><table>\n<thead><tr><th>cell</th>")
	for _, d := range s.Dimensions {
		fmt.Fprintf(&b, "<th class=\"name\">%s</th>", esc(d.Name))
	}
	b.WriteString("<th class=\"name\">run</th>")
	for _, c := range sweepColumns {
		fmt.Fprintf(&b, "<th>%s</th>", esc(c.head))
	}
	b.WriteString("</tr></thead>\n<tbody>\n")
	for _, c := range s.Found {
		for _, run := range c.Runs() {
			sum, _ := c.Summary(run)
			fmt.Fprintf(&b, "<tr><td>%d</td>", c.Index())
			for _, co := range c.Coordinates() {
				fmt.Fprintf(&b, "<td class=\"name\">%s</td>", esc(co.Value))
			}
			fmt.Fprintf(&b, "<td class=\"name\"><span class=\"swatch\" style=\"background:%s\"></span>%s</td>", Color(slices.Index(runs, run)), esc(run))
			for _, col := range sweepColumns {
				fmt.Fprintf(&b, "<td>%s</td>", esc(col.format(col.value(sum))))
			}
			b.WriteString("</tr>\n")
		}
	}
	for _, i := range s.Missing {
		fmt.Fprintf(&b, "<tr><td>%d</td><td class=\"name\" colspan=\"%d\">missing</td></tr>\n", i, len(s.Dimensions)+1+len(sweepColumns))
	}
	b.WriteString("</tbody></table></div>\n")
	b.WriteString("<footer>Generated by Switchyard's sweep merge. Same cells, same bytes.</footer>\n</main></body></html>\n")
	return b.Bytes()
}

// dimensionChart draws col against dimension di: a line chart when every value is a number,
// grouped bars otherwise. A point is the mean over the cells at that value.
func (s *Sweep) dimensionChart(di int, col sweepColumn, runs []string) string {
	d := s.Dimensions[di]
	sum := make([][]float64, len(runs)) // [run][value]
	n := make([][]int, len(runs))
	for i := range runs {
		sum[i], n[i] = make([]float64, len(d.Values)), make([]int, len(d.Values))
	}
	for _, c := range s.Found {
		vi := slices.Index(d.Values, c.Coordinates()[di].Value)
		for ri, run := range runs {
			if st, ok := c.Summary(run); ok && vi >= 0 {
				sum[ri][vi] += col.value(st)
				n[ri][vi]++
			}
		}
	}
	title := col.head + " by " + d.Name
	xs, numeric := numbers(d.Values)
	if numeric {
		lines := make([]Line, len(runs))
		for ri, run := range runs {
			lines[ri] = Line{Name: run, Color: Color(ri)}
			for vi := range d.Values {
				if n[ri][vi] > 0 {
					lines[ri].Points = append(lines[ri].Points, stats.Point{X: xs[vi], Y: sum[ri][vi] / float64(n[ri][vi])})
				}
			}
			slices.SortFunc(lines[ri].Points, func(a, b stats.Point) int { return cmp.Compare(a.X, b.X) })
		}
		return LineChart{Title: title, XLabel: d.Name, YLabel: col.head, Lines: lines, XFromData: true}.SVG()
	}
	colors := make([]string, len(runs))
	for i := range runs {
		colors[i] = Color(i)
	}
	groups := make([]BarGroup, len(d.Values))
	for vi, v := range d.Values {
		groups[vi] = BarGroup{Label: v, Values: make([]float64, len(runs))}
		for ri := range runs {
			if n[ri][vi] > 0 {
				groups[vi].Values[ri] = sum[ri][vi] / float64(n[ri][vi])
			}
		}
	}
	return BarChart{Title: title, XLabel: col.head, Series: runs, Colors: colors, Groups: groups}.SVG()
}

func numbers(vs []string) ([]float64, bool) {
	out := make([]float64, len(vs))
	for i, v := range vs {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, false
		}
		out[i] = x
	}
	return out, true
}
