package reports

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"switchyard/sim/stats"
	"switchyard/sweep"
)

// maxSummaryBytes caps one cell's summary.json: a report of a few pickers is kilobytes.
const maxSummaryBytes = 16 << 20

// SweepCell is one cell's summary.json as read back.
type SweepCell struct {
	Source string // the file it was read from, for errors only
	file   fileJSON
}

// Index is the cell's number in its grid.
func (c SweepCell) Index() int { return c.file.Cell.Index }

// Coordinates are the cell's values along the grid's dimensions.
func (c SweepCell) Coordinates() []sweep.Coordinate { return c.file.Cell.Coordinates }

// Seed is the cell's workload seed.
func (c SweepCell) Seed() uint64 { return c.file.Seed }

// Trace is the cell's workload name.
func (c SweepCell) Trace() string { return c.file.Trace }

// Runs are the cell's run names, in their order.
func (c SweepCell) Runs() []string { return c.file.PickerOrder }

// Summary is a run's headline figures as summary.json keeps them (no chart series).
func (c SweepCell) Summary(run string) (stats.Summary, bool) {
	p, ok := c.file.Pickers[run]
	if !ok {
		return stats.Summary{}, false
	}
	back := func(x pctJSON) stats.Percentiles {
		return stats.Percentiles{P50: x.P50, P90: x.P90, P99: x.P99, Mean: x.Mean}
	}
	return stats.Summary{Requests: p.Requests, Completed: p.Completed, Failed: p.Failed, Statuses: p.Statuses, Good: p.Good,
		DurationS: p.DurationS, TTFT: back(p.TTFT), ITL: back(p.ITL), E2E: back(p.E2E), ThroughputRPS: p.ThroughputRPS,
		OutputTokensPerS: p.OutputTokensPerS, GoodputRPS: p.GoodputRPS, GoodputRatio: p.GoodputRatio,
		PromptTokens: p.PromptTokens, CachedTokens: p.CachedTokens, HitRatio: p.HitRatio, HitRatioBound: p.HitRatioBound,
		Imbalance: p.Imbalance, Reasons: p.Reasons}, true
}

// RouterKV is the dynamo.kv block a run's routing core ran with.
func (c SweepCell) RouterKV(run string) (KVBlock, bool) {
	r, ok := c.file.Router[run]
	if !ok {
		return KVBlock{}, false
	}
	k := r.KV
	return KVBlock{OverlapScoreCredit: k.OverlapScoreCredit, PrefillLoadScale: k.PrefillLoadScale, RouterTemperature: k.RouterTemperature,
		DecodeActiveRequestWeight: k.DecodeActiveRequestWeight, OverlapScoreCreditDecay: k.OverlapScoreCreditDecay,
		TrackActiveBlocks: k.TrackActiveBlocks, TrackPrefillTokens: k.TrackPrefillTokens, TrackOutputBlocks: k.TrackOutputBlocks,
		ExpectedOutputTokens: k.ExpectedOutputTokens, UseKVEvents: k.UseKVEvents,
		ConditionalDisaggregation: k.ConditionalDisaggregation.Enabled, DecodeBusyThreshold: k.ConditionalDisaggregation.DecodeBusyThreshold}, true
}

// ReadCell reads one cell's summary.json and checks that it is a cell of a sweep this version
// can read.
func ReadCell(path string) (SweepCell, error) {
	f, err := os.Open(path)
	if err != nil {
		return SweepCell{}, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxSummaryBytes+1))
	if err != nil {
		return SweepCell{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(raw) > maxSummaryBytes {
		return SweepCell{}, fmt.Errorf("%s: larger than %d MiB, not a report's summary.json", path, maxSummaryBytes>>20)
	}
	var head struct {
		SchemaVersion *int `json:"schema_version"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return SweepCell{}, fmt.Errorf("%s: not a summary.json: %w", path, err)
	}
	switch {
	case head.SchemaVersion == nil:
		return SweepCell{}, fmt.Errorf("%s: no schema_version: not a report's summary.json", path)
	case *head.SchemaVersion != SchemaVersion:
		return SweepCell{}, fmt.Errorf("%s: schema_version %d, this version reads %d", path, *head.SchemaVersion, SchemaVersion)
	}
	c := SweepCell{Source: path}
	if err := json.Unmarshal(raw, &c.file); err != nil {
		return SweepCell{}, fmt.Errorf("%s: %w", path, err)
	}
	cell := c.file.Cell
	if cell == nil {
		return SweepCell{}, fmt.Errorf("%s: no \"cell\": a plain run, not a cell of a sweep (run cells with --cell N)", path)
	}
	s := cell.Sweep
	g, err := sweep.New(s.Dimensions)
	switch {
	case err != nil:
		return SweepCell{}, fmt.Errorf("%s: cell.sweep.dimensions: %w", path, err)
	case s.Cells != g.Cells():
		return SweepCell{}, fmt.Errorf("%s: cell.sweep.cells is %d, its dimensions make %d", path, s.Cells, g.Cells())
	case cell.Index < 0 || cell.Index >= s.Cells:
		return SweepCell{}, fmt.Errorf("%s: cell.index %d is outside 0..%d", path, cell.Index, s.Cells-1)
	case s.ID != sweep.ID(s.Command):
		return SweepCell{}, fmt.Errorf("%s: cell.sweep.id %s does not fingerprint its command", path, s.ID)
	}
	want, _ := g.Cell(cell.Index)
	if !slices.Equal(want, cell.Coordinates) {
		return SweepCell{}, fmt.Errorf("%s: cell %d's coordinates %s are not the grid's %s", path, cell.Index,
			sweep.Key(cell.Coordinates), sweep.Key(want))
	}
	for _, name := range c.file.PickerOrder {
		if _, ok := c.file.Pickers[name]; !ok {
			return SweepCell{}, fmt.Errorf("%s: picker_order names %q, pickers has no such run", path, name)
		}
	}
	return c, nil
}

// Sweep is a grid's cells joined: every cell found, in index order, and the indexes missing.
type Sweep struct {
	Kind, ID, Objective string
	Command             []string
	Dimensions          []sweep.Dimension
	Cells               int
	Found               []SweepCell
	Missing             []int
	// Tuned, when set, is a tune sweep's recommendation, shown before the cells.
	Tuned *SweepTuned
	// Generated is caller-provided, as in Comparison.
	Generated string
}

// JoinCells places cells in their sweep's grid. Cells of different sweeps, and two cells
// claiming one index, are refused with both files named. The result does not depend on the
// order of cells.
func JoinCells(cells []SweepCell) (*Sweep, error) {
	if len(cells) == 0 {
		return nil, errors.New("no cells to merge")
	}
	sorted := slices.Clone(cells)
	slices.SortFunc(sorted, func(a, b SweepCell) int {
		if a.Index() != b.Index() {
			return a.Index() - b.Index()
		}
		return cmp.Compare(a.Source, b.Source)
	})
	first := sorted[0]
	fs := first.file.Cell.Sweep
	s := &Sweep{Kind: fs.Kind, ID: fs.ID, Objective: fs.Objective, Command: fs.Command, Dimensions: fs.Dimensions, Cells: fs.Cells}
	for i, c := range sorted {
		cs := c.file.Cell.Sweep
		if cs.ID != fs.ID || cs.Kind != fs.Kind || cs.Objective != fs.Objective {
			return nil, fmt.Errorf("%s is a cell of sweep %s (%s), %s of sweep %s (%s): merge the cells of one sweep at a time",
				c.Source, cs.ID, cs.Kind, first.Source, fs.ID, fs.Kind)
		}
		if i > 0 && sorted[i-1].Index() == c.Index() {
			return nil, fmt.Errorf("%s and %s are both cell %d", sorted[i-1].Source, c.Source, c.Index())
		}
		s.Found = append(s.Found, c)
	}
	next := 0
	for _, c := range s.Found {
		for ; next < c.Index(); next++ {
			s.Missing = append(s.Missing, next)
		}
		next = c.Index() + 1
	}
	for ; next < s.Cells; next++ {
		s.Missing = append(s.Missing, next)
	}
	return s, nil
}

type mergedJSON struct {
	SchemaVersion int                       `json:"schema_version"`
	Title         string                    `json:"title"`
	Generated     string                    `json:"generated"`
	Sweep         sweepJSON                 `json:"sweep"`
	Found         int                       `json:"found"`
	Missing       []int                     `json:"missing"`
	CellOrder     []string                  `json:"cell_order"`
	Cells         map[string]mergedCellJSON `json:"cells"`
	Tuned         *tunedJSON                `json:"tuned,omitempty"`
}

type mergedCellJSON struct {
	Index       int                `json:"index"`
	Coordinates []sweep.Coordinate `json:"coordinates"`
	Summary     fileJSON           `json:"summary"`
}

type tunedJSON struct {
	Objective    string  `json:"objective"`
	Current      string  `json:"current"`
	Tuned        string  `json:"tuned"`
	CurrentValue float64 `json:"current_value"`
	TunedValue   float64 `json:"tuned_value"`
	Gain         float64 `json:"gain"`
}

// SweepTuned is a tune sweep's recommendation from its grid alone.
type SweepTuned struct {
	// Tuning holds one point per knob setting of the grid (its figure averaged over the other
	// dimensions), Current and Tuned among them.
	Tuning *Tuning
	// Current and Tuned are the two points' values of the knob dimension.
	Current, Tuned string
	// Gain is the tuned figure's change against the current one, as a fraction (positive:
	// better).
	Gain float64
}

func (s *Sweep) title() string {
	return fmt.Sprintf("Sweep %s: %s, %d cells", s.ID, s.Kind, s.Cells)
}

// MergedJSON is the merged summary.json: every cell's summary (without its "cell") under its
// key, in cell order.
func MergedJSON(s *Sweep) ([]byte, error) {
	f := mergedJSON{SchemaVersion: SchemaVersion, Title: s.title(), Generated: s.Generated,
		Sweep: sweepOf(&Cell{Kind: s.Kind, Sweep: s.ID, Command: s.Command, Dimensions: s.Dimensions, Cells: s.Cells, Objective: s.Objective}),
		Found: len(s.Found), Missing: append([]int{}, s.Missing...), CellOrder: []string{}, Cells: map[string]mergedCellJSON{}}
	for _, c := range s.Found {
		key := sweep.Key(c.Coordinates())
		one := c.file
		one.Cell = nil
		f.CellOrder = append(f.CellOrder, key)
		f.Cells[key] = mergedCellJSON{Index: c.Index(), Coordinates: c.Coordinates(), Summary: one}
	}
	if s.Tuned != nil && s.Tuned.Tuning.ok() {
		t := s.Tuned.Tuning
		f.Tuned = &tunedJSON{Objective: t.Objective, Current: s.Tuned.Current, Tuned: s.Tuned.Tuned,
			CurrentValue: round6(t.Points[t.Current].Value), TunedValue: round6(t.Points[t.Tuned].Value), Gain: round6(s.Tuned.Gain)}
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

// WriteSweep creates dir and writes the merged summary.json, summary.md and index.html.
func WriteSweep(dir string, s *Sweep) error {
	js, err := MergedJSON(s)
	if err != nil {
		return err
	}
	return writeFolder(dir, js, SweepMarkdown(s), SweepHTML(s))
}

// sweepRuns are every run name of the sweep in first-seen order over the cells.
func (s *Sweep) runs() []string {
	var out []string
	for _, c := range s.Found {
		for _, r := range c.Runs() {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}
