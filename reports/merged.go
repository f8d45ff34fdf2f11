package reports

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"switchyard/sweep"
)

// maxMergedBytes caps a merged summary.json read back: 10,000 cells of a few kilobytes each.
const maxMergedBytes = 256 << 20

// ReadMerged reads back the summary.json `reports merge` wrote: the sweep and every cell it
// holds, checked as the merge checks cells.
func ReadMerged(path string) (*Sweep, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxMergedBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(raw) > maxMergedBytes {
		return nil, fmt.Errorf("%s: larger than %d MiB, not a merged summary.json", path, maxMergedBytes>>20)
	}
	return ParseMerged(raw, path)
}

// ParseMerged is ReadMerged of raw, source naming it in errors.
func ParseMerged(raw []byte, source string) (*Sweep, error) {
	var head struct {
		SchemaVersion *int `json:"schema_version"`
		Cells         *json.RawMessage
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("%s: not a summary.json: %w", source, err)
	}
	switch {
	case head.SchemaVersion == nil:
		return nil, fmt.Errorf("%s: no schema_version: not a report's summary.json", source)
	case *head.SchemaVersion != SchemaVersion:
		return nil, fmt.Errorf("%s: schema_version %d, this version reads %d", source, *head.SchemaVersion, SchemaVersion)
	case head.Cells == nil:
		return nil, fmt.Errorf("%s: no \"cells\": not the summary.json of `switchyard reports merge`", source)
	}
	var m mergedJSON
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	s := m.Sweep
	g, err := sweep.New(s.Dimensions)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: sweep.dimensions: %w", source, err)
	case s.Cells != g.Cells():
		return nil, fmt.Errorf("%s: sweep.cells is %d, its dimensions make %d", source, s.Cells, g.Cells())
	case s.ID != sweep.ID(s.Command):
		return nil, fmt.Errorf("%s: sweep.id %s does not fingerprint its command", source, s.ID)
	case len(m.Cells) == 0:
		return nil, fmt.Errorf("%s: no cells", source)
	case len(m.Cells) > s.Cells:
		return nil, fmt.Errorf("%s: %d cells in a grid of %d", source, len(m.Cells), s.Cells)
	}
	keys := make([]string, 0, len(m.Cells))
	for k := range m.Cells {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	cells := make([]SweepCell, 0, len(keys))
	var errs []error
	for _, k := range keys {
		c := m.Cells[k]
		if c.Index < 0 || c.Index >= s.Cells {
			errs = append(errs, fmt.Errorf("%s: cell %q: index %d is outside 0..%d", source, k, c.Index, s.Cells-1))
			continue
		}
		want, _ := g.Cell(c.Index)
		if !slices.Equal(want, c.Coordinates) || sweep.Key(want) != k {
			errs = append(errs, fmt.Errorf("%s: cell %q: cell %d of the grid is %s", source, k, c.Index, sweep.Key(want)))
			continue
		}
		file := c.Summary
		for _, name := range file.PickerOrder {
			if _, ok := file.Pickers[name]; !ok {
				errs = append(errs, fmt.Errorf("%s: cell %q: picker_order names %q, pickers has no such run", source, k, name))
			}
		}
		file.Cell = &cellJSON{Index: c.Index, Key: k, Coordinates: c.Coordinates, Sweep: s}
		cells = append(cells, SweepCell{Source: fmt.Sprintf("%s, cell %s", source, k), file: file})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return JoinCells(cells)
}
