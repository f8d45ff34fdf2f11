package reports

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"

	"switchyard/sim/stats"
)

// The SVG primitives of the report: a line chart (linear or log X), a grouped horizontal bar
// chart and a heatmap. They emit well-formed XML with every text escaped, never a NaN or infinite
// coordinate, and a "no data" note instead of an empty plot.

// palette is Tableau 10: distinct, readable on white, consistent per picker across charts.
var palette = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

// Color returns the i-th colour of the report palette, cycling.
func Color(i int) string { return palette[((i%len(palette))+len(palette))%len(palette)] }

const (
	chartW    = 640
	chartH    = 300
	padLeft   = 64
	padRight  = 20
	padBottom = 44
	titleH    = 26
	legendRow = 18
	charW     = 7.4 // rough width of a 12px sans-serif character, for layout only
)

// Line is one series of a line chart.
type Line struct {
	Name   string
	Color  string
	Points []stats.Point
	Dashed bool
	Step   bool // draw as a step function: each Y holds until the next X
	// Markers draws a dot at each point and no line (a scatter of evaluated settings).
	Markers bool
}

// LineChart is an XY chart with axes, nice ticks, labels and a legend.
type LineChart struct {
	Title, XLabel, YLabel string
	Lines                 []Line
	LogX                  bool    // log-scale X (points with X <= 0 are drawn at the axis minimum)
	YMax                  float64 // fixed upper Y bound; 0 = from the data
	// XMax cuts a linear X axis at this value (rounded up to a tick): lines end at the plot's
	// right edge, so a long tail does not squash the rest of the chart. 0 = from the data.
	XMax float64
	// XFromData starts a linear X axis near the smallest value instead of at 0.
	XFromData     bool
	Width, Height int // 0 = defaults
	// Markers are vertical lines at X values (a fault timeline), drawn
	// over the plot with their labels.
	Markers []Marker
}

// Marker is a labelled instant on a line chart's X axis.
type Marker struct {
	X     float64
	Label string
}

// esc escapes text for HTML and XML alike (only &lt; &gt; &amp; &#39; &#34; are produced).
func esc(s string) string { return html.EscapeString(s) }

// num formats a coordinate with one decimal; callers never pass a non-finite value.
func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// niceStep rounds raw to the nearest of 1, 2, 5 or 10 times a power of ten.
func niceStep(raw float64) float64 {
	if !(raw > 0) || !finite(raw) {
		return 1
	}
	base := math.Pow(10, math.Floor(math.Log10(raw)))
	f := raw / base
	switch {
	case f < 1.5:
		f = 1
	case f < 3:
		f = 2
	case f < 7:
		f = 5
	default:
		f = 10
	}
	return f * base
}

// NiceTicks returns about n evenly spaced round tick values covering [lo, hi], and the widened
// domain they span. A degenerate or non-finite range becomes [lo, lo+1] (or [0, 1]).
func NiceTicks(lo, hi float64, n int) (ticks []float64, dlo, dhi float64) {
	if !finite(lo) || !finite(hi) {
		lo, hi = 0, 1
	}
	if hi < lo {
		lo, hi = hi, lo
	}
	if hi == lo {
		if lo == 0 {
			hi = 1
		} else {
			lo, hi = lo-math.Abs(lo)/2, hi+math.Abs(hi)/2
		}
	}
	n = max(n, 2)
	step := niceStep((hi - lo) / float64(n-1))
	first := math.Floor(lo/step + 1e-9)
	last := math.Ceil(hi/step - 1e-9)
	for k := first; k <= last; k++ {
		ticks = append(ticks, cleanFloat(k*step, step))
	}
	return ticks, cleanFloat(first*step, step), cleanFloat(last*step, step)
}

// cleanFloat removes binary noise (0.30000000000000004) relative to the tick step.
func cleanFloat(v, step float64) float64 {
	d := decimals(step)
	p := math.Pow(10, float64(d))
	return math.Round(v*p) / p
}

// decimals is how many decimal places a tick label needs for this step.
func decimals(step float64) int {
	if !(step > 0) || step >= 1 {
		return 0
	}
	return min(int(math.Ceil(-math.Log10(step)-1e-9)), 9)
}

// LogTicks returns tick values for a log axis covering [lo, hi] (lo > 0) and the widened domain,
// whose ends are 1, 2 or 5 times a power of ten. Ticks are the 1-2-5 values inside the domain when
// it spans three decades or less, else the powers of ten.
func LogTicks(lo, hi float64) (ticks []float64, dlo, dhi float64) {
	if !(lo > 0) || !finite(lo) || !finite(hi) || hi < lo {
		lo, hi = 1, 10
	}
	dlo, dhi = round125(lo, false), round125(hi, true)
	if dhi <= dlo {
		dhi = round125(dlo*1.5, true)
	}
	mults := []float64{1, 2, 5}
	if dhi/dlo > 1000*(1+1e-9) {
		mults = []float64{1}
	}
	for e := math.Floor(math.Log10(dlo) + 1e-9); e <= math.Ceil(math.Log10(dhi)); e++ {
		for _, m := range mults {
			v := cleanFloat(m*math.Pow(10, e), math.Pow(10, math.Min(e, 0)))
			if v >= dlo*(1-1e-9) && v <= dhi*(1+1e-9) {
				ticks = append(ticks, v)
			}
		}
	}
	return ticks, dlo, dhi
}

// round125 rounds x > 0 down (or up) to 1, 2 or 5 times a power of ten.
func round125(x float64, up bool) float64 {
	e := math.Floor(math.Log10(x))
	base := math.Pow(10, e)
	f := x / base
	steps := []float64{1, 2, 5, 10}
	if up {
		for _, s := range steps {
			if f <= s*(1+1e-9) {
				return cleanFloat(s*base, math.Pow(10, math.Min(e, 0)))
			}
		}
		return 10 * base
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if f >= steps[i]*(1-1e-9) {
			return cleanFloat(steps[i]*base, math.Pow(10, math.Min(e, 0)))
		}
	}
	return base
}

// label formats a tick value: thousands get a k suffix, fractions as many decimals as needed.
func label(v float64, step float64) string {
	if v != 0 && math.Abs(v) >= 10000 && math.Mod(v, 1000) == 0 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', decimals(step), 64)
}

func logLabel(v float64) string {
	if v >= 10000 && math.Mod(v, 1000) == 0 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// legendLayout places legend entries left to right, wrapping; it returns each entry's offset
// and the number of rows.
func legendLayout(names []string, width float64) (xs, rows []float64, nrows int) {
	x, row := 0.0, 0.0
	for _, n := range names {
		w := 22 + charW*float64(len([]rune(n))) + 14
		if x > 0 && x+w > width {
			x, row = 0, row+1
		}
		xs, rows = append(xs, x), append(rows, row)
		x += w
	}
	if len(names) > 0 {
		nrows = int(row) + 1
	}
	return xs, rows, nrows
}

func svgOpen(b *strings.Builder, w, h int, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`, w, h, w, h, esc(title))
	fmt.Fprintf(b, `<rect class="bg" x="0" y="0" width="%d" height="%d"/>`, w, h)
	fmt.Fprintf(b, `<text class="title" x="%d" y="18">%s</text>`, 8, esc(title))
}

func noData(b *strings.Builder, w, h int) {
	fmt.Fprintf(b, `<text class="nodata" x="%d" y="%d" text-anchor="middle">no data</text></svg>`, w/2, h/2)
}

// SVG renders the chart.
func (c LineChart) SVG() string {
	w, h := c.Width, c.Height
	if w <= 0 {
		w = chartW
	}
	if h <= 0 {
		h = chartH
	}
	var b strings.Builder
	svgOpen(&b, w, h, c.Title)

	// Data extent over finite points (and X > 0 on a log axis).
	xmin, xmax, ymax := math.Inf(1), math.Inf(-1), math.Inf(-1)
	minPos := math.Inf(1)
	hasData := false
	for _, l := range c.Lines {
		for _, p := range l.Points {
			if !finite(p.X) || !finite(p.Y) {
				continue
			}
			hasData = true
			xmin, xmax, ymax = math.Min(xmin, p.X), math.Max(xmax, p.X), math.Max(ymax, p.Y)
			if c.XMax > 0 && !c.LogX {
				xmax = math.Min(xmax, c.XMax)
			}
			if p.X > 0 {
				minPos = math.Min(minPos, p.X)
			}
		}
	}
	if !hasData {
		noData(&b, w, h)
		return b.String()
	}

	names := make([]string, len(c.Lines))
	for i, l := range c.Lines {
		names[i] = l.Name
	}
	lx, ly, nrows := legendLayout(names, float64(w-padLeft-padRight))
	top := titleH + nrows*legendRow + 8
	plotL, plotR := float64(padLeft), float64(w-padRight)
	plotT, plotB := float64(top), float64(h-padBottom)
	if plotB-plotT < 40 {
		plotB = plotT + 40
	}

	// Axes.
	var xt []float64
	var xlo, xhi float64
	logX := c.LogX && finite(minPos)
	xstep := 0.0
	if logX {
		xt, xlo, xhi = LogTicks(minPos, math.Max(xmax, minPos))
	} else {
		lo := math.Min(0, xmin)
		if c.XFromData {
			lo = xmin
		}
		xt, xlo, xhi = NiceTicks(lo, xmax, 6)
		if len(xt) > 1 {
			xstep = xt[1] - xt[0]
		}
	}
	yTop := ymax
	if c.YMax > 0 {
		yTop = c.YMax
	}
	yt, ylo, yhi := NiceTicks(0, yTop, 5)
	if c.YMax > 0 {
		yhi = c.YMax
	}
	ystep := 1.0
	if len(yt) > 1 {
		ystep = yt[1] - yt[0]
	}
	sx := func(x float64) float64 {
		if logX {
			x = math.Max(x, xlo)
			return plotL + (math.Log10(x)-math.Log10(xlo))/(math.Log10(xhi)-math.Log10(xlo))*(plotR-plotL)
		}
		return plotL + (x-xlo)/(xhi-xlo)*(plotR-plotL)
	}
	sy := func(y float64) float64 { return plotB - (y-ylo)/(yhi-ylo)*(plotB-plotT) }

	b.WriteString(`<g class="grid">`)
	for _, t := range yt {
		if t > yhi+1e-12 {
			continue
		}
		y := sy(t)
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(plotL), num(y), num(plotR), num(y))
	}
	for _, t := range xt {
		x := sx(t)
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(x), num(plotT), num(x), num(plotB))
	}
	b.WriteString(`</g><g class="axis">`)
	fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(plotL), num(plotB), num(plotR), num(plotB))
	fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(plotL), num(plotT), num(plotL), num(plotB))
	for _, t := range yt {
		if t > yhi+1e-12 {
			continue
		}
		fmt.Fprintf(&b, `<text class="tick" x="%s" y="%s" text-anchor="end">%s</text>`, num(plotL-6), num(sy(t)+4), esc(label(t, ystep)))
	}
	for _, t := range xt {
		s := label(t, xstep)
		if logX {
			s = logLabel(t)
		}
		fmt.Fprintf(&b, `<text class="tick" x="%s" y="%s" text-anchor="middle">%s</text>`, num(sx(t)), num(plotB+16), esc(s))
	}
	xl := c.XLabel
	if logX {
		xl += " (log scale)"
	}
	fmt.Fprintf(&b, `<text class="label" x="%s" y="%d" text-anchor="middle">%s</text>`, num((plotL+plotR)/2), h-8, esc(xl))
	fmt.Fprintf(&b, `<text class="label" x="14" y="%s" text-anchor="middle" transform="rotate(-90 14 %s)">%s</text>`, num((plotT+plotB)/2), num((plotT+plotB)/2), esc(c.YLabel))
	b.WriteString(`</g>`)

	// Legend.
	b.WriteString(`<g class="legend">`)
	for i, l := range c.Lines {
		x, y := plotL+lx[i], float64(titleH)+ly[i]*legendRow+6
		dash := ""
		if l.Dashed {
			dash = ` stroke-dasharray="5 3"`
		}
		if l.Markers {
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="4" fill="%s"/>`, num(x+9), num(y), esc(l.Color))
		} else {
			fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2.5"%s/>`, num(x), num(y), num(x+18), num(y), esc(l.Color), dash)
		}
		fmt.Fprintf(&b, `<text x="%s" y="%s">%s</text>`, num(x+22), num(y+4), esc(l.Name))
	}
	b.WriteString(`</g>`)

	// Lines, clipped to the plot area.
	fmt.Fprintf(&b, `<g class="lines">`)
	for _, l := range c.Lines {
		if l.Markers {
			markers(&b, l, sx, sy, xhi, yhi, ylo, logX)
			continue
		}
		var pts strings.Builder
		prevY, have := 0.0, false
		var prev stats.Point
		for _, p := range l.Points {
			if !finite(p.X) || !finite(p.Y) {
				continue
			}
			if !logX && p.X > xhi {
				// Cut at the right edge: a step holds its value there, a line is interpolated.
				if have && prev.X < xhi {
					edgeY := prev.Y
					if !l.Step && p.X > prev.X {
						edgeY = prev.Y + (p.Y-prev.Y)*(xhi-prev.X)/(p.X-prev.X)
					}
					fmt.Fprintf(&pts, "%s,%s ", num(sx(xhi)), num(sy(math.Max(math.Min(edgeY, yhi), ylo))))
				}
				break
			}
			prev = p
			x, y := sx(p.X), sy(math.Max(math.Min(p.Y, yhi), ylo))
			if !finite(x) || !finite(y) {
				continue
			}
			if l.Step && have {
				fmt.Fprintf(&pts, "%s,%s ", num(x), num(prevY))
			}
			fmt.Fprintf(&pts, "%s,%s ", num(x), num(y))
			prevY, have = y, true
		}
		if !have {
			continue
		}
		dash := ""
		if l.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(&b, `<polyline class="series" data-series="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"%s points="%s"><title>%s</title></polyline>`,
			esc(l.Name), esc(l.Color), dash, strings.TrimSpace(pts.String()), esc(l.Name))
	}
	b.WriteString(`</g>`)
	if len(c.Markers) > 0 && !logX {
		b.WriteString(`<g class="markers">`)
		for i, m := range c.Markers {
			if !finite(m.X) || m.X < xlo || m.X > xhi {
				continue
			}
			x := sx(m.X)
			// Labels step down so neighbouring faults stay legible.
			ty := plotT + 12 + float64(i%4)*13
			fmt.Fprintf(&b, `<line class="marker" x1="%s" y1="%s" x2="%s" y2="%s" stroke="#b91c1c" stroke-width="1.5" stroke-dasharray="4 3"><title>%s</title></line>`,
				num(x), num(plotT), num(x), num(plotB), esc(m.Label))
			fmt.Fprintf(&b, `<text class="marker" x="%s" y="%s" fill="#b91c1c" font-size="11">%s</text>`, num(x+3), num(ty), esc(m.Label))
		}
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// markers draws a scatter series: a dot per point inside the plot, its values in a tooltip.
func markers(b *strings.Builder, l Line, sx, sy func(float64) float64, xhi, yhi, ylo float64, logX bool) {
	fmt.Fprintf(b, `<g class="series" data-series="%s" fill="%s">`, esc(l.Name), esc(l.Color))
	for _, p := range l.Points {
		if !finite(p.X) || !finite(p.Y) || (!logX && p.X > xhi) || p.Y > yhi || p.Y < ylo {
			continue
		}
		x, y := sx(p.X), sy(p.Y)
		if !finite(x) || !finite(y) {
			continue
		}
		fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="4"><title>%s: %s, %s</title></circle>`, num(x), num(y), esc(l.Name),
			strconv.FormatFloat(p.X, 'g', 4, 64), strconv.FormatFloat(p.Y, 'g', 4, 64))
	}
	b.WriteString(`</g>`)
}

// BarChart is a horizontal grouped bar chart: one group per category, one bar per series.
type BarChart struct {
	Title, XLabel string
	Series        []string // series names (pickers), in legend order
	Colors        []string // one per series
	Groups        []BarGroup
	Width         int
}

// BarGroup is one category and its value per series (missing values count as 0).
type BarGroup struct {
	Label  string
	Values []float64
}

// SVG renders the chart; its height follows the number of bars.
func (c BarChart) SVG() string {
	w := c.Width
	if w <= 0 {
		w = chartW
	}
	var b strings.Builder
	maxV, maxLabel := 0.0, 0
	for _, g := range c.Groups {
		maxLabel = max(maxLabel, len([]rune(g.Label)))
		for _, v := range g.Values {
			if finite(v) {
				maxV = math.Max(maxV, v)
			}
		}
	}
	ns := max(len(c.Series), 1)
	barH, gap := 14.0, 10.0
	if len(c.Groups) == 0 || maxV <= 0 {
		svgOpen(&b, w, 120, c.Title)
		noData(&b, w, 120)
		return b.String()
	}
	_, _, nrows := legendLayout(c.Series, float64(w-24))
	top := float64(titleH + nrows*legendRow + 10)
	left := math.Min(math.Max(80, charW*float64(maxLabel)+16), float64(w)/2)
	right := float64(w) - 56
	groupH := barH*float64(ns) + gap
	plotH := groupH * float64(len(c.Groups))
	h := int(math.Ceil(top + plotH + padBottom))
	svgOpen(&b, w, h, c.Title)

	xt, _, xhi := NiceTicks(0, maxV, 5)
	step := 1.0
	if len(xt) > 1 {
		step = xt[1] - xt[0]
	}
	sx := func(v float64) float64 { return left + v/xhi*(right-left) }
	bottom := top + plotH

	b.WriteString(`<g class="grid">`)
	for _, t := range xt {
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(sx(t)), num(top), num(sx(t)), num(bottom))
	}
	b.WriteString(`</g><g class="axis">`)
	fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(left), num(top), num(left), num(bottom))
	for _, t := range xt {
		fmt.Fprintf(&b, `<text class="tick" x="%s" y="%s" text-anchor="middle">%s</text>`, num(sx(t)), num(bottom+16), esc(label(t, step)))
	}
	fmt.Fprintf(&b, `<text class="label" x="%s" y="%d" text-anchor="middle">%s</text>`, num((left+right)/2), h-8, esc(c.XLabel))
	b.WriteString(`</g>`)

	lx, ly, _ := legendLayout(c.Series, float64(w-24))
	b.WriteString(`<g class="legend">`)
	for i, s := range c.Series {
		x, y := 12+lx[i], float64(titleH)+ly[i]*legendRow+6
		fmt.Fprintf(&b, `<rect x="%s" y="%s" width="14" height="10" fill="%s"/>`, num(x), num(y-5), esc(c.color(i)))
		fmt.Fprintf(&b, `<text x="%s" y="%s">%s</text>`, num(x+20), num(y+4), esc(s))
	}
	b.WriteString(`</g><g class="bars">`)
	for gi, g := range c.Groups {
		y0 := top + float64(gi)*groupH + gap/2
		fmt.Fprintf(&b, `<text class="tick" x="%s" y="%s" text-anchor="end">%s</text>`, num(left-8), num(y0+barH*float64(ns)/2+4), esc(g.Label))
		for si := range ns {
			v := 0.0
			if si < len(g.Values) && finite(g.Values[si]) {
				v = math.Max(g.Values[si], 0)
			}
			name := ""
			if si < len(c.Series) {
				name = c.Series[si]
			}
			y := y0 + float64(si)*barH
			fmt.Fprintf(&b, `<rect class="bar" data-series="%s" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>`,
				esc(name), num(left), num(y+1), num(sx(v)-left), num(barH-2), esc(c.color(si)), esc(fmt.Sprintf("%s · %s: %s", name, g.Label, strconv.FormatFloat(v, 'f', -1, 64))))
			fmt.Fprintf(&b, `<text class="value" x="%s" y="%s">%s</text>`, num(sx(v)+4), num(y+barH-3), esc(strconv.FormatFloat(v, 'f', -1, 64)))
		}
	}
	b.WriteString(`</g></svg>`)
	return b.String()
}

func (c BarChart) color(i int) string {
	if i < len(c.Colors) {
		return c.Colors[i]
	}
	return Color(i)
}

// Heatmap draws one row per series of step functions over [0, XMax], each cell coloured by the
// time-weighted mean of the row's value over the cell (0 before its first point), on a scale
// from white at 0 to Color at Max, drawn as a legend.
type Heatmap struct {
	Title, XLabel string
	Rows          []HeatRow
	Color         string
	XMax          float64 // 0 = the last point's X
	// Max is the value drawn in full colour; larger cells are drawn full too. Heatmaps meant to
	// be compared share one Max (HeatmapMax). 0 = this heatmap's largest cell.
	Max     float64
	Unit    string // what a cell's value is, for the legend
	Columns int    // 0 = 120
	Width   int
}

// HeatmapMax is the largest cell of any of the heatmaps, each on its own rows, X range and
// columns: the Max that puts them on one colour scale.
func HeatmapMax(maps ...Heatmap) float64 {
	peak := 0.0
	for _, m := range maps {
		xmax, cols := m.extent()
		if !(xmax > 0) || !finite(xmax) {
			continue
		}
		for _, r := range m.Rows {
			for _, v := range stepMeans(r.Points, xmax, cols) {
				peak = math.Max(peak, v)
			}
		}
	}
	return peak
}

// extent is the X range and the number of columns the heatmap is drawn with.
func (c Heatmap) extent() (xmax float64, cols int) {
	cols = c.Columns
	if cols <= 0 {
		cols = 120
	}
	xmax = c.XMax
	for _, r := range c.Rows {
		if c.XMax <= 0 && len(r.Points) > 0 {
			if x := r.Points[len(r.Points)-1].X; finite(x) {
				xmax = math.Max(xmax, x)
			}
		}
	}
	return xmax, cols
}

// HeatRow is one row of a heatmap: a step series (X non-decreasing).
type HeatRow struct {
	Label  string
	Points []stats.Point
}

// SVG renders the heatmap.
func (c Heatmap) SVG() string {
	w := c.Width
	if w <= 0 {
		w = chartW
	}
	xmax, cols := c.extent()
	maxLabel := 0
	for _, r := range c.Rows {
		maxLabel = max(maxLabel, len([]rune(r.Label)))
	}
	var b strings.Builder
	if len(c.Rows) == 0 || !(xmax > 0) || !finite(xmax) {
		svgOpen(&b, w, 120, c.Title)
		noData(&b, w, 120)
		return b.String()
	}
	cells := make([][]float64, len(c.Rows))
	peak := 0.0
	for i, r := range c.Rows {
		cells[i] = stepMeans(r.Points, xmax, cols)
		for _, v := range cells[i] {
			peak = math.Max(peak, v)
		}
	}
	if c.Max > 0 && finite(c.Max) {
		peak = c.Max
	}
	rowH := math.Max(4, math.Min(16, 320/float64(len(c.Rows))))
	top := float64(titleH + 22)
	left := math.Min(math.Max(60, charW*float64(maxLabel)+14), float64(w)/3)
	right := float64(w - padRight)
	bottom := top + rowH*float64(len(c.Rows))
	h := int(math.Ceil(bottom + padBottom))
	svgOpen(&b, w, h, c.Title)
	heatLegend(&b, c.Color, peak, c.Unit, float64(titleH))
	cw := (right - left) / float64(cols)
	b.WriteString(`<g class="cells">`)
	for i, r := range c.Rows {
		y := top + float64(i)*rowH
		if rowH >= 9 {
			fmt.Fprintf(&b, `<text class="tick" x="%s" y="%s" text-anchor="end">%s</text>`, num(left-6), num(y+rowH/2+4), esc(r.Label))
		}
		for j, v := range cells[i] {
			op := 0.0
			if peak > 0 {
				op = math.Min(v/peak, 1)
			}
			fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s" fill-opacity="%s"/>`,
				num(left+float64(j)*cw), num(y), num(cw+0.3), num(rowH-0.5), esc(c.Color), strconv.FormatFloat(math.Round(op*100)/100, 'f', -1, 64))
		}
	}
	b.WriteString(`</g><g class="axis">`)
	xt, _, _ := NiceTicks(0, xmax, 6)
	step := 1.0
	if len(xt) > 1 {
		step = xt[1] - xt[0]
	}
	for _, t := range xt {
		if t > xmax*(1+1e-9) {
			continue
		}
		x := left + t/xmax*(right-left)
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(x), num(bottom), num(x), num(bottom+4))
		fmt.Fprintf(&b, `<text class="tick" x="%s" y="%s" text-anchor="middle">%s</text>`, num(x), num(bottom+16), esc(label(t, step)))
	}
	fmt.Fprintf(&b, `<text class="label" x="%s" y="%d" text-anchor="middle">%s</text>`, num((left+right)/2), h-8, esc(c.XLabel))
	b.WriteString(`</g></svg>`)
	return b.String()
}

// heatLegend draws the colour scale: a ramp from white (0) to color (peak), labelled.
func heatLegend(b *strings.Builder, color string, peak float64, unit string, y float64) {
	const steps, stepW = 10, 14.0
	fmt.Fprintf(b, `<g class="legend scale" data-max="%s">`, strconv.FormatFloat(peak, 'f', -1, 64))
	fmt.Fprintf(b, `<text class="tick" x="8" y="%s">0</text>`, num(y+9))
	for i := range steps {
		op := float64(i+1) / steps
		fmt.Fprintf(b, `<rect x="%s" y="%s" width="%s" height="10" fill="%s" fill-opacity="%s" stroke="#d0d7de" stroke-width="0.5"/>`,
			num(18+float64(i)*stepW), num(y), num(stepW), esc(color), strconv.FormatFloat(op, 'f', -1, 64))
	}
	text := strconv.FormatFloat(math.Round(peak), 'f', 0, 64)
	if unit != "" {
		text += " " + unit
	}
	fmt.Fprintf(b, `<text class="tick" x="%s" y="%s">%s</text></g>`, num(22+steps*stepW), num(y+9), esc(text))
}

// stepMeans integrates a step series over cols equal cells of [0, xmax] and returns each cell's
// mean value; before the first point the value is 0.
func stepMeans(pts []stats.Point, xmax float64, cols int) []float64 {
	out := make([]float64, cols)
	width := xmax / float64(cols)
	for i, p := range pts {
		if !finite(p.X) || !finite(p.Y) {
			continue
		}
		from, to := math.Max(p.X, 0), xmax
		if i+1 < len(pts) {
			to = math.Min(pts[i+1].X, xmax)
		}
		if to <= from {
			continue
		}
		for c := int(from / width); c < cols; c++ {
			lo, hi := float64(c)*width, float64(c+1)*width
			if lo >= to {
				break
			}
			out[c] += p.Y * (math.Min(hi, to) - math.Max(lo, from)) / width
		}
	}
	return out
}
