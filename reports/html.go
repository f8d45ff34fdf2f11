package reports

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"switchyard/sim/stats"
)

// spreadWindows is how many equal windows of the run the load-spread chart averages each
// worker's load over: few enough that a window's mean is steady, enough to show a trend.
const spreadWindows = 40

// tailCut: a linear latency axis whose largest value exceeds tailCut times the largest p99 ends
// at tailShown times that p99, so the tail of a few requests does not squash every curve.
const (
	tailCut   = 2.0
	tailShown = 1.2
)

// The stylesheet avoids '<', '>' and '&' so the page stays well-formed XML as well as HTML.
const css = `
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;color:#1f2328;background:#f6f8fa;margin:0}
main{box-sizing:border-box;max-width:1360px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:23px;margin:0 0 6px}
h2{font-size:17px;margin:32px 0 6px;padding-bottom:4px;border-bottom:1px solid #d0d7de}
p.note{color:#57606a;margin:4px 0 12px;max-width:900px}
.meta{color:#57606a;margin:0}
.meta span{margin-right:20px;white-space:nowrap}
.meta b{color:#1f2328;font-weight:600}
.scroll{overflow-x:auto}
table{border-collapse:collapse;background:#fff;border:1px solid #d0d7de;font-variant-numeric:tabular-nums}
th,td{padding:5px 8px;border-bottom:1px solid #eaeef2;text-align:right;white-space:nowrap}
thead th{background:#f0f3f6;font-weight:600;border-bottom:1px solid #d0d7de}
thead tr.group th{text-align:center;border-bottom:none;color:#57606a;font-weight:500}
th.name,td.name{text-align:left}
td.best{font-weight:700;color:#116329}
.swatch{display:inline-block;width:11px;height:11px;border-radius:3px;margin-right:7px;vertical-align:-1px}
.charts{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
svg.chart{background:#fff;border:1px solid #d0d7de;border-radius:6px;max-width:100%;height:auto}
svg .bg{fill:#fff}
svg .title{font:600 13px system-ui,sans-serif;fill:#1f2328}
svg .tick{font:11px system-ui,sans-serif;fill:#57606a}
svg .label{font:12px system-ui,sans-serif;fill:#1f2328}
svg .legend text{font:12px system-ui,sans-serif;fill:#1f2328}
svg .value{font:10px system-ui,sans-serif;fill:#57606a}
svg .grid line{stroke:#eaeef2;stroke-width:1}
svg .axis line{stroke:#8c959f;stroke-width:1}
svg .nodata{font:italic 13px system-ui,sans-serif;fill:#8c959f}
dl{max-width:960px}
dt{font-weight:600;margin-top:8px}
dd{margin:2px 0 0 18px;color:#3d444d}
footer{margin-top:36px;color:#8c959f;font-size:12px}
`

// HTML returns index.html: one self-contained page, no scripts, no external resources.
func HTML(c Comparison) []byte {
	var b bytes.Buffer
	title := c.Title
	if title == "" {
		title = "Picker comparison"
	}
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>")
	b.WriteString(`<meta name="viewport" content="width=device-width, initial-scale=1"/>`)
	fmt.Fprintf(&b, "<title>%s</title><style>%s</style></head>\n<body><main>\n", esc(title), css)
	fmt.Fprintf(&b, "<h1>%s</h1>\n<p class=\"meta\">", esc(title))
	for _, kv := range contextLines(c) {
		fmt.Fprintf(&b, "<span><b>%s</b> %s</span> ", esc(kv[0]), esc(kv[1]))
	}
	b.WriteString("</p>\n")

	b.WriteString("<h2 id=\"headline\">Headline</h2>\n")
	headlineTable(&b, c)
	tuningHTML(&b, c)

	colors := make([]string, len(c.Pickers))
	for i := range c.Pickers {
		colors[i] = Color(i)
	}

	b.WriteString("<h2 id=\"latency\">Latency</h2>\n<p class=\"note\">Empirical CDFs over completed requests: the share of requests (y) at or below each latency (x). Further left is faster.</p>\n<div class=\"charts\">\n")
	for _, m := range []struct {
		title string
		pick  func(stats.Summary) ([]stats.Point, stats.Percentiles)
	}{
		{"Time to first token", func(s stats.Summary) ([]stats.Point, stats.Percentiles) { return s.Series.TTFT, s.TTFT }},
		{"Inter-token latency (per-request mean)", func(s stats.Summary) ([]stats.Point, stats.Percentiles) { return s.Series.ITL, s.ITL }},
		{"End-to-end latency", func(s stats.Summary) ([]stats.Point, stats.Percentiles) { return s.Series.E2E, s.E2E }},
	} {
		lines := make([]Line, len(c.Pickers))
		p99 := 0.0
		for i, r := range c.Pickers {
			pts, pct := m.pick(r.Summary)
			lines[i] = Line{Name: r.Name, Color: colors[i], Points: pts}
			p99 = math.Max(p99, pct.P99)
		}
		b.WriteString(cdfChart(m.title, lines, p99).SVG())
		b.WriteString("\n")
	}
	b.WriteString("</div>\n")

	b.WriteString("<h2 id=\"cache\">Prefix cache</h2>\n<p class=\"note\">Cumulative hit ratio in arrival order: prompt tokens served from the chosen worker's prefix cache over prompt tokens so far. Dashed: the infinite-cache bound of the workload.</p>\n<div class=\"charts\">\n")
	b.WriteString(hitChart(c, colors).SVG())
	b.WriteString("\n</div>\n")

	b.WriteString("<h2 id=\"load\">Load</h2>\n<p class=\"note\">How unevenly each picker spreads active KV blocks over the workers: the coefficient of variation (standard deviation over mean) of the workers' mean load in each of " +
		strconv.Itoa(spreadWindows) + " equal windows of the run; 0 is perfectly even, lower is better. Below, each picker's active KV blocks per worker, every heatmap on the same colour scale.</p>\n<div class=\"charts\">\n")
	b.WriteString(spreadChart(c, colors).SVG())
	b.WriteString("\n")
	for _, h := range workerHeatmaps(c, colors) {
		b.WriteString(h.SVG())
		b.WriteString("\n")
	}
	b.WriteString("</div>\n")

	b.WriteString("<h2 id=\"reasons\">Selection reasons</h2>\n<p class=\"note\">How many selections each picker made for each reason.</p>\n<div class=\"charts\">\n")
	b.WriteString(reasonChart(c, colors).SVG())
	b.WriteString("\n</div>\n")

	definitions(&b)
	b.WriteString("<footer>Generated by Switchyard's picker comparison. Same inputs, same bytes.</footer>\n</main></body></html>\n")
	return b.Bytes()
}

// wideRange reports whether the lines' X values span two decades or more, which a log axis
// shows better.
func wideRange(lines []Line) bool {
	lo, hi := math.Inf(1), 0.0
	for _, l := range lines {
		for _, p := range l.Points {
			if p.X > 0 && finite(p.X) {
				lo, hi = math.Min(lo, p.X), math.Max(hi, p.X)
			}
		}
	}
	return finite(lo) && hi/lo >= 100
}

// cdfChart is a latency CDF: on a log axis when the values span two decades, else on a linear
// axis cut short of a long tail (at tailShown × the largest p99 when the largest value exceeds
// tailCut × it).
func cdfChart(title string, lines []Line, p99 float64) LineChart {
	ch := LineChart{Title: title, XLabel: "latency (ms)", YLabel: "fraction of requests", Lines: lines, YMax: 1, LogX: wideRange(lines)}
	if ch.LogX || !(p99 > 0) {
		return ch
	}
	if hi := maxX(lines); hi > tailCut*p99 {
		ch.XMax, ch.XFromData = tailShown*p99, true
		ch.XLabel = "latency (ms), cut at " + strconv.FormatFloat(tailShown, 'f', -1, 64) + " × the largest p99"
	}
	return ch
}

func maxX(lines []Line) float64 {
	hi := 0.0
	for _, l := range lines {
		for _, p := range l.Points {
			if finite(p.X) {
				hi = math.Max(hi, p.X)
			}
		}
	}
	return hi
}

// runEnd is the latest time any picker's load series reaches: the common X range of the load
// charts.
func runEnd(c Comparison) float64 {
	end := 0.0
	for _, r := range c.Pickers {
		end = math.Max(end, r.Summary.DurationS)
		for _, l := range r.Summary.Series.Load {
			if n := len(l.Points); n > 0 && finite(l.Points[n-1].X) {
				end = math.Max(end, l.Points[n-1].X)
			}
		}
	}
	return end
}

// spreadChart draws each picker's load spread over the run, its mean in the legend.
func spreadChart(c Comparison, colors []string) LineChart {
	end := runEnd(c)
	lines := make([]Line, len(c.Pickers))
	for i, r := range c.Pickers {
		pts, mean := LoadSpread(r.Summary.Series.Load, end, spreadWindows)
		lines[i] = Line{Name: fmt.Sprintf("%s (mean %.2f)", r.Name, mean), Color: colors[i], Points: pts}
	}
	return LineChart{Title: "Load spread over workers (coefficient of variation per window)", XLabel: "time (s)", YLabel: "std / mean", Lines: lines, Width: 980}
}

// LoadSpread is the coefficient of variation across workers of their mean active blocks in each
// of windows equal windows of [0, end]: X the window's middle, Y the population standard
// deviation over the mean. Windows where no worker holds a block are left out, and mean is the
// average over the windows kept (0 without any).
func LoadSpread(loads []stats.WorkerLoad, end float64, windows int) (pts []stats.Point, mean float64) {
	if len(loads) == 0 || !(end > 0) || !finite(end) || windows < 1 {
		return nil, 0
	}
	perWorker := make([][]float64, len(loads))
	for i, l := range loads {
		perWorker[i] = stepMeans(l.Points, end, windows)
	}
	n := float64(len(loads))
	for w := range windows {
		sum, sq := 0.0, 0.0
		for _, cells := range perWorker {
			sum += cells[w]
			sq += cells[w] * cells[w]
		}
		avg := sum / n
		if !(avg > 0) || !finite(avg) {
			continue
		}
		cv := math.Sqrt(math.Max(sq/n-avg*avg, 0)) / avg
		if !finite(cv) {
			continue
		}
		pts = append(pts, stats.Point{X: (float64(w) + 0.5) * end / float64(windows), Y: cv})
		mean += cv
	}
	if len(pts) > 0 {
		mean /= float64(len(pts))
	}
	return pts, mean
}

// workerHeatmaps are each picker's active KV blocks per worker over the same time range and on
// one colour scale, so the pickers compare at a glance.
func workerHeatmaps(c Comparison, colors []string) []Heatmap {
	end := runEnd(c)
	maps := make([]Heatmap, len(c.Pickers))
	for i, r := range c.Pickers {
		rows := make([]HeatRow, len(r.Summary.Series.Load))
		for j, l := range r.Summary.Series.Load {
			rows[j] = HeatRow{Label: l.Worker, Points: l.Points}
		}
		maps[i] = Heatmap{Title: r.Name + ": active KV blocks per worker", XLabel: "time (s)", Rows: rows, Color: colors[i],
			XMax: end, Unit: "active KV blocks (mean per cell)"}
	}
	shared := HeatmapMax(maps...)
	for i := range maps {
		maps[i].Max = shared
	}
	return maps
}

func hitChart(c Comparison, colors []string) LineChart {
	var lines []Line
	end := 0.0
	for _, r := range c.Pickers {
		end = math.Max(end, r.Summary.DurationS)
		for _, p := range r.Summary.Series.HitRatio {
			if finite(p.X) {
				end = math.Max(end, p.X)
			}
		}
	}
	for i, r := range c.Pickers {
		lines = append(lines, Line{Name: r.Name, Color: colors[i], Points: r.Summary.Series.HitRatio})
	}
	sameBound := true
	for _, r := range c.Pickers {
		sameBound = sameBound && r.Summary.HitRatioBound == c.Pickers[0].Summary.HitRatioBound
	}
	hline := func(y float64) []stats.Point { return []stats.Point{{X: 0, Y: y}, {X: end, Y: y}} }
	switch {
	case len(c.Pickers) == 0:
	case sameBound:
		lines = append(lines, Line{Name: "infinite-cache bound", Color: "#57606a", Dashed: true, Points: hline(c.Pickers[0].Summary.HitRatioBound)})
	default:
		for i, r := range c.Pickers {
			lines = append(lines, Line{Name: r.Name + " bound", Color: colors[i], Dashed: true, Points: hline(r.Summary.HitRatioBound)})
		}
	}
	return LineChart{Title: "Hit ratio over time (cumulative)", XLabel: "arrival time (s)", YLabel: "hit ratio", Lines: lines, YMax: 1, Width: 980}
}

func reasonChart(c Comparison, colors []string) BarChart {
	total := map[string]int{}
	for _, r := range c.Pickers {
		for k, v := range r.Summary.Reasons {
			total[k] += v
		}
	}
	reasons := make([]string, 0, len(total))
	for k := range total {
		reasons = append(reasons, k)
	}
	// Most used first; ties by name so the order is deterministic.
	slices.SortFunc(reasons, func(a, b string) int {
		if total[a] != total[b] {
			return total[b] - total[a]
		}
		return strings.Compare(a, b)
	})
	names := make([]string, len(c.Pickers))
	for i, r := range c.Pickers {
		names[i] = r.Name
	}
	groups := make([]BarGroup, len(reasons))
	for gi, reason := range reasons {
		vals := make([]float64, len(c.Pickers))
		for i, r := range c.Pickers {
			vals[i] = float64(r.Summary.Reasons[reason])
		}
		groups[gi] = BarGroup{Label: reason, Values: vals}
	}
	return BarChart{Title: "Selections per reason", XLabel: "selections", Series: names, Colors: colors, Groups: groups, Width: 980}
}

// column is one figure of the headline table; better says which way is better (-1 lower,
// +1 higher, 0 no ranking).
type column struct {
	group, head string
	value       func(stats.Summary) float64
	format      func(float64) string
	better      int
}

func intFmt(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

var columns = []column{
	{"", "requests", func(s stats.Summary) float64 { return float64(s.Requests) }, intFmt, 0},
	{"", "failed", func(s stats.Summary) float64 { return float64(s.Failed) }, intFmt, -1},
	{"TTFT (ms)", "p50", func(s stats.Summary) float64 { return s.TTFT.P50 }, fmtMs, -1},
	{"TTFT (ms)", "p90", func(s stats.Summary) float64 { return s.TTFT.P90 }, fmtMs, -1},
	{"TTFT (ms)", "p99", func(s stats.Summary) float64 { return s.TTFT.P99 }, fmtMs, -1},
	{"ITL (ms)", "p50", func(s stats.Summary) float64 { return s.ITL.P50 }, fmtMs, -1},
	{"ITL (ms)", "p99", func(s stats.Summary) float64 { return s.ITL.P99 }, fmtMs, -1},
	{"E2E (ms)", "p50", func(s stats.Summary) float64 { return s.E2E.P50 }, fmtMs, -1},
	{"E2E (ms)", "p99", func(s stats.Summary) float64 { return s.E2E.P99 }, fmtMs, -1},
	{"rates (per s)", "req", func(s stats.Summary) float64 { return s.ThroughputRPS }, fmtRate, +1},
	{"rates (per s)", "tokens", func(s stats.Summary) float64 { return s.OutputTokensPerS }, fmtRate, +1},
	{"goodput", "req/s", func(s stats.Summary) float64 { return s.GoodputRPS }, fmtRate, +1},
	{"goodput", "ratio", func(s stats.Summary) float64 { return s.GoodputRatio }, fmtRatio, +1},
	{"prefix cache", "hit ratio", func(s stats.Summary) float64 { return s.HitRatio }, fmtRatio, +1},
	{"prefix cache", "bound", func(s stats.Summary) float64 { return s.HitRatioBound }, fmtRatio, 0},
	{"", "imbalance", func(s stats.Summary) float64 { return s.Imbalance }, fmtRatio, -1},
}

func headlineTable(b *bytes.Buffer, c Comparison) {
	b.WriteString("<div class=\"scroll\"><table>\n<thead><tr class=\"group\"><th></th>")
	for i := 0; i < len(columns); {
		j := i
		for j < len(columns) && columns[j].group == columns[i].group {
			j++
		}
		fmt.Fprintf(b, "<th colspan=\"%d\">%s</th>", j-i, esc(columns[i].group))
		i = j
	}
	fmt.Fprintf(b, "</tr>\n<tr><th class=\"name\">%s</th>", esc(c.column()))
	for _, col := range columns {
		fmt.Fprintf(b, "<th>%s</th>", esc(col.head))
	}
	b.WriteString("</tr></thead>\n<tbody>\n")
	best := make([]float64, len(columns))
	ranked := make([]bool, len(columns))
	for ci, col := range columns {
		if col.better == 0 || len(c.Pickers) < 2 {
			continue
		}
		// Highlight only when the pickers differ on this figure (as displayed).
		first := col.format(col.value(c.Pickers[0].Summary))
		for i, r := range c.Pickers {
			v := col.value(r.Summary)
			if i == 0 || float64(col.better)*v > float64(col.better)*best[ci] {
				best[ci] = v
			}
			ranked[ci] = ranked[ci] || col.format(v) != first
		}
	}
	for i, r := range c.Pickers {
		fmt.Fprintf(b, "<tr><td class=\"name\"><span class=\"swatch\" style=\"background:%s\"></span>%s</td>", Color(i), esc(r.Name))
		for ci, col := range columns {
			v := col.value(r.Summary)
			cls := ""
			if ranked[ci] && col.format(v) == col.format(best[ci]) {
				cls = ` class="best"`
			}
			fmt.Fprintf(b, "<td%s>%s</td>", cls, esc(col.format(v)))
		}
		b.WriteString("</tr>\n")
	}
	if len(c.Pickers) == 0 {
		fmt.Fprintf(b, "<tr><td class=\"name\" colspan=\"%d\">no picker runs</td></tr>\n", len(columns)+1)
	}
	b.WriteString("</tbody></table></div>\n<p class=\"note\">Bold green: the best value among pickers where they differ.</p>\n")
}

func definitions(b *bytes.Buffer) {
	b.WriteString("<h2 id=\"definitions\">Definitions</h2>\n<dl>\n")
	for _, d := range [][2]string{
		{"Latency percentiles (TTFT, ITL, E2E)", "Over completed (status ok) requests, nearest-rank: the p-th percentile of n sorted values is the value at rank ceil(p/100 × n). ITL is each request's mean inter-token latency, (E2E − TTFT)/(output tokens − 1); requests with fewer than two output tokens have none and are left out of ITL figures. Milliseconds."},
		{"Throughput", "Completed requests, and their output tokens, per second of the run."},
		{"Goodput", "Requests that completed and met every SLO bound (TTFT, ITL; an unset bound is no bound), per second; the goodput ratio divides them by all requests."},
		{"Hit ratio", "Prompt tokens served from the chosen worker's prefix cache over prompt tokens, over every request that reached a worker."},
		{"Hit ratio bound", "The same ratio for one infinite prefix cache that sees every prompt in arrival order: a full KV block hits when the chain of blocks up to and including it was seen before; partial last blocks never hit."},
		{"Load spread", "In each of " + strconv.Itoa(spreadWindows) + " equal windows of the run, every worker's time-weighted mean of active KV blocks; the spread is their standard deviation over their mean (coefficient of variation). 0 is perfectly even; windows where no worker holds a block are left out. Drawn from the per-worker series of the charts, which keep each short interval's highest value."},
		{"Imbalance", "Time-weighted mean over the run of max over workers of active KV blocks divided by the mean over workers, over intervals where the mean is above 0. Every worker seen in any load sample counts, at 0 before its first sample. 1 is perfectly even."},
		{"Selection reasons", "How many selections the picker made for each reason it reported."},
	} {
		fmt.Fprintf(b, "<dt>%s</dt><dd>%s</dd>\n", esc(d[0]), esc(d[1]))
	}
	b.WriteString("</dl>\n")
}
