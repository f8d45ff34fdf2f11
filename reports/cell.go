package reports

import "switchyard/sweep"

// Cell says which cell of a sweep a comparison is (docs/sweeps.md): enough for `switchyard
// reports merge` to place it in the grid and to refuse cells of another sweep.
type Cell struct {
	// Kind is the command the sweep runs: "bench pickers" or "tune".
	Kind string
	// Sweep fingerprints the sweep (sweep.ID of Command).
	Sweep string
	// Command is the arguments every cell shares, without --cell and --out.
	Command    []string
	Dimensions []sweep.Dimension
	// Index numbers the cell in 0..Cells-1; Coordinates are its value along each dimension.
	Index, Cells int
	Coordinates  []sweep.Coordinate
	// Objective is the figure a tune sweep ranks its cells by ("" for bench pickers).
	Objective string
}

type cellJSON struct {
	Index       int                `json:"index"`
	Key         string             `json:"key"`
	Coordinates []sweep.Coordinate `json:"coordinates"`
	Sweep       sweepJSON          `json:"sweep"`
}

type sweepJSON struct {
	ID         string            `json:"id"`
	Kind       string            `json:"kind"`
	Command    []string          `json:"command"`
	Dimensions []sweep.Dimension `json:"dimensions"`
	Cells      int               `json:"cells"`
	Objective  string            `json:"objective,omitempty"`
}

func cellOf(c *Cell) *cellJSON {
	if c == nil {
		return nil
	}
	coords := c.Coordinates
	if coords == nil {
		coords = []sweep.Coordinate{}
	}
	return &cellJSON{Index: c.Index, Key: sweep.Key(coords), Coordinates: coords, Sweep: sweepOf(c)}
}

func sweepOf(c *Cell) sweepJSON {
	cmd, dims := c.Command, c.Dimensions
	if cmd == nil {
		cmd = []string{}
	}
	if dims == nil {
		dims = []sweep.Dimension{}
	}
	return sweepJSON{ID: c.Sweep, Kind: c.Kind, Command: cmd, Dimensions: dims, Cells: c.Cells, Objective: c.Objective}
}
