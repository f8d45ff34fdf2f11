package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"switchyard/reports"
	"switchyard/scenario/expect"
	"switchyard/sim"
	"switchyard/sim/stats"
)

// writeScenarioReport writes a scenario's result.json and index.html.
func writeScenarioReport(dir string, r *Result) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "index.html"), scenarioHTML(r), 0o644)
}

const style = `<style>
body{font-family:system-ui,sans-serif;margin:24px;max-width:1100px;color:#111}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;font-size:14px}
.pass{color:#15803d;font-weight:600}.fail{color:#b91c1c;font-weight:600}.skip{color:#a16207;font-weight:600}
svg{display:block;margin:8px 0}.grid line{stroke:#eee}.axis line{stroke:#444}.tick,.label{font-size:12px}
</style>`

func state(m *ModeResult) (string, string) {
	switch {
	case m.Skipped != "":
		return "skip", "SKIPPED"
	case m.Passed():
		return "pass", "PASS"
	}
	return "fail", "FAIL"
}

func scenarioHTML(r *Result) []byte {
	var b bytes.Buffer
	e := html.EscapeString
	fmt.Fprintf(&b, "<!doctype html><html><head><meta charset=\"utf-8\"><title>%s</title>%s</head><body>", e(r.Name), style)
	fmt.Fprintf(&b, "<h1>%s</h1><p>%s</p>", e(r.Name), e(r.Path))
	if r.Error != "" {
		fmt.Fprintf(&b, "<p class=\"fail\">%s</p></body></html>", e(r.Error))
		return b.Bytes()
	}
	sc := r.scenario
	if len(sc.Faults) > 0 {
		b.WriteString("<h2>Faults</h2><table><tr><th>at</th><th>fault</th><th>target</th></tr>")
		for _, f := range sc.Faults {
			fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td></tr>", f.At.Std(), e(string(f.Kind)), e(faultTarget(sc, f)))
		}
		b.WriteString("</table>")
	}
	if a := r.Agreement; a != nil {
		b.WriteString("<h2>Simulated and live</h2><table><tr><th></th><th>sim</th><th>live</th></tr>")
		fmt.Fprintf(&b, "<tr><td>served</td><td>%.4f</td><td>%.4f</td></tr>", a.SimServedRatio, a.LiveServedRatio)
		fmt.Fprintf(&b, "<tr><td>TTFT p50 (ms)</td><td>%.2f</td><td>%.2f</td></tr>", a.SimTTFT.P50, a.LiveTTFT.P50)
		fmt.Fprintf(&b, "<tr><td>TTFT p90 (ms)</td><td>%.2f</td><td>%.2f</td></tr>", a.SimTTFT.P90, a.LiveTTFT.P90)
		b.WriteString("</table>")
		fmt.Fprintf(&b, "<p>Pick-share distance %.4f; same decode worker for %.1f%% of requests; %d of %d verdicts agree.</p>",
			a.PickShareDistance, 100*a.SameWorkerPicks, a.VerdictsAgree, a.Verdicts)
	}
	for _, m := range []*ModeResult{r.Sim, r.Live} {
		if m == nil {
			continue
		}
		cls, word := state(m)
		fmt.Fprintf(&b, "<h2>%s run: <span class=\"%s\">%s</span></h2>", e(m.Mode), cls, word)
		switch {
		case m.Skipped != "":
			fmt.Fprintf(&b, "<p>%s</p>", e(m.Skipped))
			continue
		case m.Error != "":
			fmt.Fprintf(&b, "<p class=\"fail\">%s</p>", e(m.Error))
			continue
		}
		fmt.Fprintf(&b, "<p>%d requests, %d served.</p>", m.Requests, m.Served)
		b.WriteString("<table><tr><th>expectation</th><th>verdict</th><th>got</th><th>detail</th></tr>")
		for _, v := range m.Verdicts {
			c, w := "pass", "holds"
			switch {
			case v.Skipped != "":
				c, w = "skip", "skipped: "+v.Skipped
			case !v.OK:
				c, w = "fail", "FAILED"
			}
			fmt.Fprintf(&b, "<tr><td>%s</td><td class=\"%s\">%s</td><td>%s</td><td>%s</td></tr>", e(v.Title), c, w, e(v.Got), e(v.Detail))
		}
		b.WriteString("</table>")
		for _, ch := range charts(sc, m.evidence) {
			b.WriteString(ch.SVG())
		}
	}
	b.WriteString("</body></html>\n")
	return b.Bytes()
}

func faultTarget(sc *sim.Scenario, f sim.Fault) string {
	if f.Kind.OfBroker() {
		return "broker " + f.Broker
	}
	labels := workerLabels(sc)
	if f.Worker >= 0 && f.Worker < len(labels) {
		return labels[f.Worker]
	}
	return fmt.Sprint(f.Worker)
}

// workerLabels name the fleet's workers in declaration order.
func workerLabels(sc *sim.Scenario) []string {
	var out []string
	for _, g := range sc.Fleet {
		for i := 0; i < g.Count; i++ {
			out = append(out, fmt.Sprintf("w%d %s", len(out), g.Role))
		}
	}
	return out
}

// bucket is a width that splits the run into about 60 intervals.
func bucket(end time.Duration) time.Duration {
	w := end / 60
	for _, step := range []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute} {
		if w <= step {
			return step
		}
	}
	return 5 * time.Minute
}

// charts draw a run's latency, in-flight requests and picks per worker
// over time, with the scenario's faults marked.
func charts(sc *sim.Scenario, ev *expect.Evidence) []reports.LineChart {
	if ev == nil {
		return nil
	}
	var marks []reports.Marker
	for _, f := range sc.Faults {
		marks = append(marks, reports.Marker{X: f.At.Std().Seconds(), Label: string(f.Kind) + " " + shortTarget(sc, f)})
	}
	w := bucket(ev.End)
	nb := int(ev.End/w) + 1
	// TTFT p50/p90 of the requests arriving in each interval.
	byBucket := make([][]float64, nb)
	for _, r := range ev.Requests {
		if r.Status == "ok" {
			i := min(int(r.Arrival/w), nb-1)
			byBucket[i] = append(byBucket[i], float64(r.TTFT)/1e6)
		}
	}
	var p50, p90 []stats.Point
	for i, xs := range byBucket {
		if len(xs) == 0 {
			continue
		}
		slices.Sort(xs)
		x := (float64(i) + 0.5) * w.Seconds()
		p50 = append(p50, stats.Point{X: x, Y: stats.Percentile(xs, 50)})
		p90 = append(p90, stats.Point{X: x, Y: stats.Percentile(xs, 90)})
	}
	latency := reports.LineChart{Title: "TTFT of the requests arriving in each " + w.String(), XLabel: "scenario time (s)", YLabel: "TTFT (ms)",
		Lines:   []reports.Line{{Name: "p50", Color: reports.Color(0), Points: p50}, {Name: "p90", Color: reports.Color(1), Points: p90}},
		Markers: marks}

	labels := workerLabels(sc)
	inflight := reports.LineChart{Title: "Requests in flight per worker (decode pin)", XLabel: "scenario time (s)", YLabel: "requests", Markers: marks}
	picks := reports.LineChart{Title: "Picks per worker per " + w.String(), XLabel: "scenario time (s)", YLabel: "picks", Markers: marks}
	end := make(map[uint64]time.Duration, len(ev.Requests))
	for _, r := range ev.Requests {
		if r.Status != "" {
			end[r.ID] = r.End
		} else {
			end[r.ID] = ev.End
		}
	}
	type change struct {
		at    time.Duration
		delta int
	}
	changes := make([][]change, len(labels))
	counts := make([][]int, len(labels))
	for i := range counts {
		counts[i] = make([]int, nb)
	}
	for _, p := range ev.Picks {
		if p.Decode < 0 || p.Decode >= len(labels) {
			continue
		}
		counts[p.Decode][min(int(p.At/w), nb-1)]++
		if p.Prefill >= 0 && p.Prefill < len(labels) {
			counts[p.Prefill][min(int(p.At/w), nb-1)]++
		}
		if e, ok := end[p.RequestID]; ok {
			changes[p.Decode] = append(changes[p.Decode], change{p.At, 1}, change{max(e, p.At), -1})
		}
	}
	for i, name := range labels {
		cs := changes[i]
		sort.SliceStable(cs, func(a, b int) bool { return cs[a].at < cs[b].at })
		pts := []stats.Point{{X: 0, Y: 0}}
		n := 0
		for _, c := range cs {
			n += c.delta
			pts = append(pts, stats.Point{X: c.at.Seconds(), Y: float64(n)})
		}
		inflight.Lines = append(inflight.Lines, reports.Line{Name: name, Color: reports.Color(i), Step: true,
			Points: stats.DownsampleStep(pts, stats.MaxLoadPoints)})
		var pp []stats.Point
		for b, n := range counts[i] {
			pp = append(pp, stats.Point{X: (float64(b) + 0.5) * w.Seconds(), Y: float64(n)})
		}
		picks.Lines = append(picks.Lines, reports.Line{Name: name, Color: reports.Color(i), Points: pp})
	}
	return []reports.LineChart{latency, inflight, picks}
}

func shortTarget(sc *sim.Scenario, f sim.Fault) string {
	if f.Kind.OfBroker() {
		return f.Broker
	}
	return fmt.Sprintf("w%d", f.Worker)
}

// WriteIndex writes dir/index.html, linking every scenario's report.
func WriteIndex(dir string, results []*Result) error {
	var b bytes.Buffer
	e := html.EscapeString
	fmt.Fprintf(&b, "<!doctype html><html><head><meta charset=\"utf-8\"><title>Scenario suite</title>%s</head><body><h1>Scenario suite</h1>", style)
	b.WriteString("<table><tr><th>scenario</th><th>sim</th><th>live</th><th>failed expectations</th></tr>")
	for _, r := range results {
		cell := func(m *ModeResult) string {
			if m == nil {
				return "<td></td>"
			}
			c, w := state(m)
			return fmt.Sprintf("<td class=\"%s\">%s</td>", c, w)
		}
		var failed []string
		if r.Error != "" {
			failed = append(failed, r.Error)
		}
		for _, m := range []*ModeResult{r.Sim, r.Live} {
			if m == nil {
				continue
			}
			if m.Error != "" {
				failed = append(failed, m.Mode+": "+m.Error)
			}
			for _, v := range expect.Failed(m.Verdicts) {
				failed = append(failed, m.Mode+": "+v.Title+" (got "+v.Got+")")
			}
		}
		fmt.Fprintf(&b, "<tr><td><a href=\"%s/index.html\">%s</a></td>%s%s<td>%s</td></tr>", e(slug(r.Name)), e(r.Name),
			cell(r.Sim), cell(r.Live), e(strings.Join(failed, "; ")))
	}
	b.WriteString("</table></body></html>\n")
	return os.WriteFile(filepath.Join(dir, "index.html"), b.Bytes(), 0o644)
}
