// Package reports writes the report folder of a picker comparison: summary.json (a stable schema
// for scripts and CI), summary.md (the headline table) and index.html (one self-contained page
// with inline SVG charts). Output is a pure function of the Comparison: the same input gives the
// same bytes. The schema and every definition are in docs/reports.md.
package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"switchyard/sim/stats"
)

// SchemaVersion is summary.json's "schema_version". It changes only when a key is removed or its
// meaning changes; new keys may be added within a version.
const SchemaVersion = 1

// Comparison is what a report shows: one run per picker on the same workload and fleet.
type Comparison struct {
	Title string
	Trace string // the workload: a trace file name or a generator description
	Fleet string // a description of the simulated fleet
	Setup *Setup // the fleet's settings in full (summary.json's fleet_config); nil = unknown
	Seed  uint64
	// SeedSource says where Seed came from (e.g. "--seed", "scenario file"); "" = not said.
	SeedSource string
	Generated  string // caller-provided (e.g. the version that produced the report); never the wall clock here
	SLO        stats.SLO
	Pickers    []Run // in the order given on the command line
	// Column heads the runs' name column ("" = "picker"): a comparison of
	// something else than pickers (router replicas) names its runs.
	Column string
	// Tuning, when set, is the knob search the runs come from: index.html and summary.md show
	// it before the comparison (summary.json does not carry it).
	Tuning *Tuning
	// Cell, when set, says which cell of a sweep the comparison is (summary.json's "cell").
	Cell *Cell
}

// column is the runs' name column's head.
func (c Comparison) column() string {
	if c.Column == "" {
		return "picker"
	}
	return c.Column
}

// Run is one picker's result.
type Run struct {
	Name    string
	Summary stats.Summary
	// Router is the routing core's settings for this run (summary.json's router.<name>); nil =
	// not said, and the run is left out of "router".
	Router *RunRouter
}

// Write creates dir (and its parents) and writes index.html, summary.md and summary.json into it,
// replacing files of those names.
func Write(dir string, c Comparison) error {
	if err := validate(c); err != nil {
		return err
	}
	js, err := SummaryJSON(c)
	if err != nil {
		return err
	}
	return writeFolder(dir, js, SummaryMarkdown(c), HTML(c))
}

// writeFolder creates dir and writes a report's three files into it.
func writeFolder(dir string, summaryJSON, markdown, page []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("reports: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{"summary.json", summaryJSON}, {"summary.md", markdown}, {"index.html", page}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o644); err != nil {
			return fmt.Errorf("reports: %w", err)
		}
	}
	return nil
}

func validate(c Comparison) error {
	seen := make(map[string]bool, len(c.Pickers))
	var errs []error
	for i, r := range c.Pickers {
		switch {
		case r.Name == "":
			errs = append(errs, fmt.Errorf("pickers[%d]: empty name", i))
		case seen[r.Name]:
			errs = append(errs, fmt.Errorf("pickers[%d]: duplicate name %q", i, r.Name))
		}
		seen[r.Name] = true
	}
	if len(errs) > 0 {
		return fmt.Errorf("reports: invalid comparison: %w", errors.Join(errs...))
	}
	return nil
}

type fileJSON struct {
	SchemaVersion int                      `json:"schema_version"`
	Title         string                   `json:"title"`
	Trace         string                   `json:"trace"`
	Fleet         string                   `json:"fleet"`
	FleetConfig   setupJSON                `json:"fleet_config"`
	Router        map[string]runRouterJSON `json:"router"`
	Seed          uint64                   `json:"seed"`
	SeedSource    string                   `json:"seed_source"`
	Generated     string                   `json:"generated"`
	SLO           sloJSON                  `json:"slo"`
	PickerOrder   []string                 `json:"picker_order"`
	Pickers       map[string]pickerJSON    `json:"pickers"`
	Cell          *cellJSON                `json:"cell,omitempty"`
}

type sloJSON struct {
	TTFTMs float64 `json:"ttft_ms"` // 0 = no bound
	ITLMs  float64 `json:"itl_ms"`
}

type pctJSON struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Mean float64 `json:"mean"`
}

type pickerJSON struct {
	Requests         int            `json:"requests"`
	Completed        int            `json:"completed"`
	Failed           int            `json:"failed"`
	Statuses         map[string]int `json:"statuses"`
	Good             int            `json:"good"`
	DurationS        float64        `json:"duration_s"`
	TTFT             pctJSON        `json:"ttft_ms"`
	ITL              pctJSON        `json:"itl_ms"`
	E2E              pctJSON        `json:"e2e_ms"`
	ThroughputRPS    float64        `json:"throughput_rps"`
	OutputTokensPerS float64        `json:"output_tokens_per_s"`
	GoodputRPS       float64        `json:"goodput_rps"`
	GoodputRatio     float64        `json:"goodput_ratio"`
	PromptTokens     int64          `json:"prompt_tokens"`
	CachedTokens     int64          `json:"cached_tokens"`
	HitRatio         float64        `json:"hit_ratio"`
	HitRatioBound    float64        `json:"hit_ratio_bound"`
	Imbalance        float64        `json:"imbalance"`
	Reasons          map[string]int `json:"reasons"`
}

// round6 rounds to 6 decimal places and maps NaN and ±Inf to 0, so the file is valid JSON,
// readable, and stable across platforms.
func round6(v float64) float64 {
	if !finite(v) {
		return 0
	}
	r := math.Round(v*1e6) / 1e6
	if !finite(r) { // |v| so large that v*1e6 overflowed: keep v itself
		return v
	}
	return r
}

func pct(p stats.Percentiles) pctJSON {
	return pctJSON{P50: round6(p.P50), P90: round6(p.P90), P99: round6(p.P99), Mean: round6(p.Mean)}
}

func counts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func msOf(d time.Duration) float64 { return round6(d.Seconds() * 1000) }

// SummaryJSON returns summary.json: indented, keys in a fixed order (maps sorted), a trailing
// newline.
func SummaryJSON(c Comparison) ([]byte, error) {
	if err := validate(c); err != nil {
		return nil, err
	}
	f := fileJSON{
		SchemaVersion: SchemaVersion,
		Title:         c.Title,
		Trace:         c.Trace,
		Fleet:         c.Fleet,
		FleetConfig:   setupOf(c.Setup),
		Router:        routersOf(c.Pickers),
		Seed:          c.Seed,
		SeedSource:    c.SeedSource,
		Generated:     c.Generated,
		SLO:           sloJSON{TTFTMs: msOf(c.SLO.TTFT), ITLMs: msOf(c.SLO.ITL)},
		PickerOrder:   make([]string, 0, len(c.Pickers)),
		Pickers:       make(map[string]pickerJSON, len(c.Pickers)),
		Cell:          cellOf(c.Cell),
	}
	for _, r := range c.Pickers {
		s := r.Summary
		f.PickerOrder = append(f.PickerOrder, r.Name)
		f.Pickers[r.Name] = pickerJSON{
			Requests:         s.Requests,
			Completed:        s.Completed,
			Failed:           s.Failed,
			Statuses:         counts(s.Statuses),
			Good:             s.Good,
			DurationS:        round6(s.DurationS),
			TTFT:             pct(s.TTFT),
			ITL:              pct(s.ITL),
			E2E:              pct(s.E2E),
			ThroughputRPS:    round6(s.ThroughputRPS),
			OutputTokensPerS: round6(s.OutputTokensPerS),
			GoodputRPS:       round6(s.GoodputRPS),
			GoodputRatio:     round6(s.GoodputRatio),
			PromptTokens:     s.PromptTokens,
			CachedTokens:     s.CachedTokens,
			HitRatio:         round6(s.HitRatio),
			HitRatioBound:    round6(s.HitRatioBound),
			Imbalance:        round6(s.Imbalance),
			Reasons:          counts(s.Reasons),
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("reports: %w", err)
	}
	return buf.Bytes(), nil
}
