package reports

import (
	"encoding/xml"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"switchyard/sim/stats"
)

// wellFormed parses s as XML and fails the test on any error.
func wellFormed(t *testing.T, s string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(s))
	d.Strict = true
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%.400s", err, s)
		}
	}
}

var exponent = regexp.MustCompile(`(^|[\s",=(:>])-?[0-9.]+[eE][+-]?[0-9]`)

func noNaN(t *testing.T, s string) {
	t.Helper()
	for _, bad := range []string{"NaN", "Inf"} {
		if strings.Contains(s, bad) {
			t.Fatalf("output contains %q", bad)
		}
	}
	if m := exponent.FindString(s); m != "" {
		t.Fatalf("output contains an exponent number %q", m)
	}
}

// isNice reports whether step is 1, 2 or 5 times a power of ten.
func isNice(step float64) bool {
	e := math.Floor(math.Log10(step))
	f := step / math.Pow(10, e)
	for _, m := range []float64{1, 2, 5, 10} {
		if math.Abs(f-m) < 1e-6 {
			return true
		}
	}
	return false
}

func TestNiceTicksExamples(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		n      int
		want   []float64
	}{
		{0, 1, 5, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{0, 97, 5, []float64{0, 20, 40, 60, 80, 100}},
		{0, 1085, 5, []float64{0, 200, 400, 600, 800, 1000, 1200}},
		{0, 0.37, 5, []float64{0, 0.1, 0.2, 0.3, 0.4}},
		{0, 0, 5, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}}, // degenerate: [0, 1]
		{12, 58, 6, []float64{10, 20, 30, 40, 50, 60}},
	} {
		got, _, _ := NiceTicks(c.lo, c.hi, c.n)
		if !slices.Equal(got, c.want) {
			t.Errorf("NiceTicks(%v, %v, %d) = %v, want %v", c.lo, c.hi, c.n, got, c.want)
		}
	}
}

func TestNiceTicksProperties(t *testing.T) {
	for _, lo := range []float64{0, 0.001, 0.3, 7, 123, 5e4} {
		for _, span := range []float64{1e-3, 0.07, 1, 3.3, 42, 999, 1.7e6} {
			hi := lo + span
			ticks, dlo, dhi := NiceTicks(lo, hi, 5)
			if dlo > lo || dhi < hi || len(ticks) < 2 || len(ticks) > 12 {
				t.Fatalf("[%v,%v]: domain [%v,%v], %d ticks", lo, hi, dlo, dhi, len(ticks))
			}
			step, _ := strconv.ParseFloat(strconv.FormatFloat(ticks[1]-ticks[0], 'g', 6, 64), 64)
			if !isNice(step) {
				t.Fatalf("[%v,%v]: step %v not nice", lo, hi, step)
			}
			for i, v := range ticks {
				if math.Abs(v-(ticks[0]+float64(i)*step)) > step*1e-6 {
					t.Fatalf("[%v,%v]: uneven ticks %v", lo, hi, ticks)
				}
				if r := v / step; math.Abs(r-math.Round(r)) > 1e-6 {
					t.Fatalf("[%v,%v]: tick %v not a multiple of %v", lo, hi, v, step)
				}
			}
		}
	}
	if ticks, lo, hi := NiceTicks(math.NaN(), math.Inf(1), 5); len(ticks) == 0 || lo != 0 || hi != 1 {
		t.Errorf("non-finite range: %v [%v,%v]", ticks, lo, hi)
	}
}

func TestLogTicks(t *testing.T) {
	ticks, lo, hi := LogTicks(14, 2100)
	if lo != 10 || hi != 5000 {
		t.Errorf("domain [%v,%v], want [10,5000]", lo, hi)
	}
	if want := []float64{10, 20, 50, 100, 200, 500, 1000, 2000, 5000}; !slices.Equal(ticks, want) {
		t.Errorf("ticks %v, want %v", ticks, want)
	}
	ticks, lo, hi = LogTicks(0.03, 40000)
	if lo != 0.02 || hi != 50000 {
		t.Errorf("domain [%v,%v]", lo, hi)
	}
	if want := []float64{0.1, 1, 10, 100, 1000, 10000}; !slices.Equal(ticks, want) {
		t.Errorf("wide ticks %v, want %v", ticks, want)
	}
	if ticks, lo, hi := LogTicks(5, 5); lo != 5 || hi != 10 || !slices.Equal(ticks, []float64{5, 10}) {
		t.Errorf("single value: %v [%v,%v]", ticks, lo, hi)
	}
}

func TestLineChartNoData(t *testing.T) {
	for _, lines := range [][]Line{
		nil,
		{{Name: "a", Color: "#000"}},
		{{Name: "a", Color: "#000", Points: []stats.Point{{X: math.NaN(), Y: 1}, {X: 1, Y: math.Inf(1)}}}},
	} {
		s := LineChart{Title: "t", Lines: lines, LogX: true}.SVG()
		wellFormed(t, s)
		noNaN(t, s)
		if !strings.Contains(s, "no data") || strings.Contains(s, "<polyline") {
			t.Errorf("no-data chart: %s", s)
		}
	}
}

func TestLineChartSkipsNonFiniteAndDegenerate(t *testing.T) {
	c := LineChart{Title: "x <&> y", XLabel: "ms", YLabel: "share", Lines: []Line{
		{Name: "a&b", Color: "#4e79a7", Points: []stats.Point{{X: 1, Y: 0.5}, {X: math.NaN(), Y: 1}, {X: 2, Y: 1}}},
		{Name: "single", Color: "#f28e2b", Points: []stats.Point{{X: 3, Y: 3}}},
		{Name: "zeroes", Color: "#e15759", Points: []stats.Point{{X: 0, Y: 0}}},
	}}
	for _, logX := range []bool{false, true} {
		c.LogX = logX
		s := c.SVG()
		wellFormed(t, s)
		noNaN(t, s)
		if n := strings.Count(s, "<polyline"); n != 3 {
			t.Errorf("logX=%v: %d polylines, want 3", logX, n)
		}
		if !strings.Contains(s, "x &lt;&amp;&gt; y") || !strings.Contains(s, `data-series="a&amp;b"`) {
			t.Errorf("text not escaped")
		}
	}
	// Everything at one point: a degenerate range must still give finite coordinates.
	s := LineChart{Lines: []Line{{Name: "p", Points: []stats.Point{{X: 0, Y: 0}}}}}.SVG()
	wellFormed(t, s)
	noNaN(t, s)
}

func pointsOf(t *testing.T, svg string) []string {
	t.Helper()
	i := strings.Index(svg, ` points="`)
	if i < 0 {
		t.Fatal("no points")
	}
	rest := svg[i+len(` points="`):]
	return strings.Fields(rest[:strings.IndexByte(rest, '"')])
}

func TestStepLine(t *testing.T) {
	pts := []stats.Point{{X: 0, Y: 1}, {X: 1, Y: 2}, {X: 2, Y: 0}}
	plain := pointsOf(t, LineChart{Lines: []Line{{Name: "a", Points: pts}}}.SVG())
	step := pointsOf(t, LineChart{Lines: []Line{{Name: "a", Points: pts, Step: true}}}.SVG())
	if len(plain) != 3 || len(step) != 5 {
		t.Fatalf("plain %v, step %v", plain, step)
	}
	// The step's extra vertex at x=1 keeps the previous y.
	y := func(p string) string { return p[strings.IndexByte(p, ',')+1:] }
	x := func(p string) string { return p[:strings.IndexByte(p, ',')] }
	if x(step[1]) != x(step[2]) || y(step[1]) != y(step[0]) || y(step[2]) != y(plain[1]) {
		t.Errorf("step vertices %v", step)
	}
}

func TestBarChart(t *testing.T) {
	s := BarChart{Title: "reasons", Series: []string{"a", "b"}, Groups: []BarGroup{
		{Label: "load", Values: []float64{3, 1}},
		{Label: "kv_aware", Values: []float64{0, 2}},
		{Label: "short", Values: []float64{math.NaN()}},
	}}.SVG()
	wellFormed(t, s)
	noNaN(t, s)
	if n := strings.Count(s, `<rect class="bar"`); n != 6 {
		t.Errorf("%d bars, want 6", n)
	}
	if n := strings.Count(s, `data-series="b"`); n != 3 {
		t.Errorf("%d bars of b, want 3", n)
	}
	empty := BarChart{Title: "reasons", Series: []string{"a"}}.SVG()
	wellFormed(t, empty)
	if !strings.Contains(empty, "no data") || strings.Contains(empty, `class="bar"`) {
		t.Errorf("empty bar chart: %s", empty)
	}
}

func TestStepMeans(t *testing.T) {
	got := stepMeans([]stats.Point{{X: 0, Y: 2}, {X: 5, Y: 4}}, 10, 2)
	if !slices.Equal(got, []float64{2, 4}) {
		t.Errorf("aligned: %v", got)
	}
	// 0 until 2.5, then 4: the first cell holds 4 for half its width.
	got = stepMeans([]stats.Point{{X: 2.5, Y: 4}}, 10, 2)
	if !slices.Equal(got, []float64{2, 4}) {
		t.Errorf("late start: %v", got)
	}
	got = stepMeans([]stats.Point{{X: 0, Y: 1}, {X: 1, Y: 3}, {X: 20, Y: 9}}, 4, 4)
	if !slices.Equal(got, []float64{1, 3, 3, 3}) {
		t.Errorf("beyond xmax: %v", got)
	}
}

func TestHeatmap(t *testing.T) {
	rows := []HeatRow{{Label: "w<1>", Points: []stats.Point{{X: 0, Y: 5}, {X: 10, Y: 5}}}, {Label: "w2"}}
	s := Heatmap{Title: "h", Rows: rows, Color: "#4e79a7", Columns: 10}.SVG()
	wellFormed(t, s)
	noNaN(t, s)
	if n := strings.Count(s, `fill-opacity="1"/>`); n != 10 {
		t.Errorf("%d full cells, want 10", n)
	}
	if n := strings.Count(s, `fill-opacity="0"`); n != 10 {
		t.Errorf("%d empty cells, want 10", n)
	}
	if !strings.Contains(s, "w&lt;1&gt;") {
		t.Error("label not escaped")
	}
	empty := Heatmap{Title: "h", Rows: []HeatRow{{Label: "w"}}}.SVG()
	wellFormed(t, empty)
	if !strings.Contains(empty, "no data") {
		t.Error("empty heatmap has no note")
	}
}

func TestLineChartXMaxCutsTheTail(t *testing.T) {
	// A CDF whose last point is far out: cut at 10, the line ends at the right edge, interpolated.
	pts := []stats.Point{{X: 2, Y: 0.1}, {X: 6, Y: 0.5}, {X: 8, Y: 0.9}, {X: 208, Y: 1}}
	full := LineChart{Lines: []Line{{Name: "a", Points: pts}}}.SVG()
	cut := LineChart{XMax: 10, Lines: []Line{{Name: "a", Points: pts}}}.SVG()
	wellFormed(t, cut)
	noNaN(t, cut)
	if strings.Contains(cut, ">200<") || !strings.Contains(full, ">200<") {
		t.Errorf("the cut axis still reaches the tail")
	}
	got := pointsOf(t, cut)
	if len(got) != 4 {
		t.Fatalf("cut line %v, want 3 points and the edge", got)
	}
	x := func(p string) float64 { v, _ := strconv.ParseFloat(p[:strings.IndexByte(p, ',')], 64); return v }
	y := func(p string) float64 { v, _ := strconv.ParseFloat(p[strings.IndexByte(p, ',')+1:], 64); return v }
	if edge := float64(chartW - padRight); x(got[3]) != edge {
		t.Errorf("the line ends at x=%v, want the plot's right edge %v", x(got[3]), edge)
	}
	// Interpolated between (8, 0.9) and (208, 1) at x=10: 0.901, just above the third point.
	if !(y(got[3]) <= y(got[2]) && y(got[2])-y(got[3]) < 1) {
		t.Errorf("edge point %v after %v: not interpolated", got[3], got[2])
	}
	// XFromData starts the axis near the smallest value instead of 0.
	from := LineChart{XMax: 10, XFromData: true, Lines: []Line{{Name: "a", Points: pts}}}.SVG()
	if strings.Contains(from, `text-anchor="middle">0</text>`) || !strings.Contains(full, `text-anchor="middle">0</text>`) {
		t.Error("XFromData axis still starts at 0")
	}
}

func TestLoadSpread(t *testing.T) {
	even := []stats.WorkerLoad{
		{Worker: "a", Points: []stats.Point{{X: 0, Y: 10}, {X: 10, Y: 10}}},
		{Worker: "b", Points: []stats.Point{{X: 0, Y: 10}, {X: 10, Y: 10}}},
	}
	pts, mean := LoadSpread(even, 10, 5)
	if len(pts) != 5 || mean != 0 || pts[0].X != 1 || pts[4].X != 9 {
		t.Errorf("even load: %v mean %v", pts, mean)
	}
	// a holds 30 and b 10 throughout: mean 20, standard deviation 10.
	uneven := []stats.WorkerLoad{
		{Worker: "a", Points: []stats.Point{{X: 0, Y: 30}}},
		{Worker: "b", Points: []stats.Point{{X: 0, Y: 10}}},
	}
	if pts, mean := LoadSpread(uneven, 10, 2); len(pts) != 2 || mean != 0.5 || pts[0].Y != 0.5 {
		t.Errorf("uneven load: %v mean %v", pts, mean)
	}
	// Idle windows are left out; nothing at all gives no points.
	late := []stats.WorkerLoad{{Worker: "a", Points: []stats.Point{{X: 5, Y: 4}}}, {Worker: "b"}}
	if pts, _ := LoadSpread(late, 10, 2); len(pts) != 1 || pts[0].X != 7.5 || pts[0].Y != 1 {
		t.Errorf("late load: %v", pts)
	}
	if pts, mean := LoadSpread(nil, 10, 4); pts != nil || mean != 0 {
		t.Errorf("no workers: %v %v", pts, mean)
	}
	if pts, _ := LoadSpread(even, math.NaN(), 4); pts != nil {
		t.Errorf("NaN end: %v", pts)
	}
}

func TestHeatmapsShareAScale(t *testing.T) {
	low := Heatmap{Title: "low", Color: "#4e79a7", XMax: 10, Columns: 10, Rows: []HeatRow{{Label: "w", Points: []stats.Point{{X: 0, Y: 5}}}}}
	high := Heatmap{Title: "high", Color: "#f28e2b", XMax: 10, Columns: 10, Rows: []HeatRow{{Label: "w", Points: []stats.Point{{X: 0, Y: 20}}}}}
	if m := HeatmapMax(low, high); m != 20 {
		t.Fatalf("shared max %v, want 20", m)
	}
	low.Max, high.Max = 20, 20
	ls, hs := low.SVG(), high.SVG()
	wellFormed(t, ls)
	if n := strings.Count(ls, `fill-opacity="0.25"/>`); n != 10 {
		t.Errorf("5 of 20: %d quarter-filled cells, want 10", n)
	}
	if n := strings.Count(hs, `fill-opacity="1"/>`); n != 10 {
		t.Errorf("20 of 20: %d full cells, want 10", n)
	}
	for _, s := range []string{ls, hs} {
		if !strings.Contains(s, `data-max="20"`) || !strings.Contains(s, ">20</text>") {
			t.Errorf("legend does not show the shared max: %s", s)
		}
	}
}
