package reports

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"switchyard/sim/stats"
)

// SummaryMarkdown returns summary.md: the comparison's context and a table of headline figures.
func SummaryMarkdown(c Comparison) []byte {
	var b bytes.Buffer
	title := c.Title
	if title == "" {
		title = "Picker comparison"
	}
	fmt.Fprintf(&b, "# %s\n\n", mdText(title))
	for _, kv := range contextLines(c) {
		fmt.Fprintf(&b, "- %s: %s\n", kv[0], mdText(kv[1]))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "| %s | requests | completed | failed | TTFT p50 / p90 / p99 (ms) | ITL p50 / p90 / p99 (ms) | E2E p50 / p99 (ms) | throughput (req/s) | goodput (req/s) | goodput ratio | hit ratio | hit ratio bound | imbalance |\n", mdText(c.column()))
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range c.Pickers {
		s := r.Summary
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s / %s / %s | %s / %s / %s | %s / %s | %s | %s | %s | %s | %s | %s |\n",
			mdText(r.Name), s.Requests, s.Completed, s.Failed,
			fmtMs(s.TTFT.P50), fmtMs(s.TTFT.P90), fmtMs(s.TTFT.P99),
			fmtMs(s.ITL.P50), fmtMs(s.ITL.P90), fmtMs(s.ITL.P99),
			fmtMs(s.E2E.P50), fmtMs(s.E2E.P99),
			fmtRate(s.ThroughputRPS), fmtRate(s.GoodputRPS), fmtRatio(s.GoodputRatio),
			fmtRatio(s.HitRatio), fmtRatio(s.HitRatioBound), fmtRatio(s.Imbalance))
	}
	if len(c.Pickers) == 0 {
		b.WriteString("\nNo picker runs.\n")
	}
	if c.Tuning.ok() {
		b.WriteString("\n")
		tuningMarkdown(&b, c)
	}
	b.WriteString("\nLatency percentiles are nearest-rank over completed requests. " +
		"[Definitions](index.html#definitions) of every figure are in index.html and in `docs/reports.md` of the " +
		"Switchyard source; charts are in [index.html](index.html), machine-readable figures in `summary.json`.\n")
	return b.Bytes()
}

// contextLines are the comparison's labelled context, shared by summary.md and index.html.
func contextLines(c Comparison) [][2]string {
	var out [][2]string
	add := func(k, v string) {
		if v != "" {
			out = append(out, [2]string{k, v})
		}
	}
	add("Trace", c.Trace)
	add("Fleet", c.Fleet)
	seed := fmt.Sprint(c.Seed)
	if c.SeedSource != "" {
		seed += " (" + c.SeedSource + ")"
	}
	add("Seed", seed)
	add("SLO", sloText(c.SLO))
	add("Generated", c.Generated)
	return out
}

func sloText(s stats.SLO) string {
	var parts []string
	if s.TTFT > 0 {
		parts = append(parts, "TTFT ≤ "+plainMs(s.TTFT)+" ms")
	}
	if s.ITL > 0 {
		parts = append(parts, "ITL ≤ "+plainMs(s.ITL)+" ms")
	}
	if len(parts) == 0 {
		return "none (every completed request is good)"
	}
	return strings.Join(parts, ", ")
}

// plainMs prints a duration in milliseconds without trailing zeros (800, 12.5).
func plainMs(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64)
}

// mdText makes s safe inside a Markdown table cell or list item: one line, pipes and the
// characters Markdown would interpret escaped.
func mdText(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune("\\`*_[]<>|#", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// fmtMs prints a latency with precision that suits its size.
func fmtMs(v float64) string {
	switch {
	case !finite(v):
		return "0"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 1000:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtRate(v float64) string {
	if !finite(v) {
		return "0"
	}
	if v >= 1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtRatio(v float64) string {
	if !finite(v) {
		return "0"
	}
	return fmt.Sprintf("%.3f", v)
}
