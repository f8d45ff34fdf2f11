// Package sweep lays a grid of runs out as numbered cells: it reads
// --sweep NAME=V1,V2,... specifications, counts the cells of their
// cartesian product and names each cell's coordinates. Cell numbers
// depend only on the specifications, in the order given, so a cell
// computed on one machine is the same cell on every other
// (docs/sweeps.md).
package sweep

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Ceilings on a grid, checked before anything is allocated for it.
const (
	// MaxCells is the most cells one grid may have: a Kubernetes Indexed
	// Job runs up to this many completions comfortably, and a merge reads
	// one summary.json per cell.
	MaxCells = 10000
	// MaxDimensions is the most --sweep flags of one grid.
	MaxDimensions = 8
	// MaxValues is the most values of one dimension.
	MaxValues = 1000
	// MaxSpecLen is the longest --sweep value accepted.
	MaxSpecLen = 64 << 10
)

// Dimension is one swept flag and the values it takes, in the order given.
type Dimension struct {
	Name   string   `json:"name"`
	Values []string `json:"values"`
}

// Coordinate is a cell's value along one dimension.
type Coordinate struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Grid is the cartesian product of its dimensions.
type Grid struct {
	Dimensions []Dimension
}

// ParseDimension reads one specification, NAME=V1,V2,...: a name of
// lowercase letters, digits and dashes, and at least one value, none
// empty, none repeated.
func ParseDimension(spec string) (Dimension, error) {
	if len(spec) > MaxSpecLen {
		return Dimension{}, fmt.Errorf("--sweep: a specification of %d bytes is longer than %d", len(spec), MaxSpecLen)
	}
	name, list, ok := strings.Cut(spec, "=")
	if !ok {
		return Dimension{}, fmt.Errorf("--sweep %q: want NAME=V1,V2,... (e.g. seed=1,2,3)", spec)
	}
	name = strings.TrimSpace(name)
	if !validName(name) {
		return Dimension{}, fmt.Errorf("--sweep %q: %q is not a flag name (lowercase letters, digits and dashes)", spec, name)
	}
	if strings.Count(list, ",")+1 > MaxValues {
		return Dimension{}, fmt.Errorf("--sweep %s: more than %d values", name, MaxValues)
	}
	d := Dimension{Name: name}
	seen := map[string]bool{}
	for _, v := range strings.Split(list, ",") {
		v = strings.TrimSpace(v)
		switch {
		case v == "":
			return Dimension{}, fmt.Errorf("--sweep %s: an empty value in %q", name, list)
		case seen[v]:
			return Dimension{}, fmt.Errorf("--sweep %s: the value %q is given twice", name, v)
		}
		seen[v] = true
		d.Values = append(d.Values, v)
	}
	return d, nil
}

func validName(s string) bool {
	if s == "" || s[0] == '-' || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// New checks the dimensions together: no name twice, at most
// MaxDimensions of them, at most MaxCells cells.
func New(dims []Dimension) (Grid, error) {
	if len(dims) > MaxDimensions {
		return Grid{}, fmt.Errorf("--sweep: %d dimensions, at most %d", len(dims), MaxDimensions)
	}
	seen := map[string]bool{}
	cells := 1
	for _, d := range dims {
		if seen[d.Name] {
			return Grid{}, fmt.Errorf("--sweep %s is given twice: list every value in one --sweep %s=V1,V2,...", d.Name, d.Name)
		}
		seen[d.Name] = true
		if len(d.Values) == 0 {
			return Grid{}, fmt.Errorf("--sweep %s: no values", d.Name)
		}
		cells *= len(d.Values) // at most MaxValues, and cells stays <= MaxCells: no overflow
		if cells > MaxCells {
			return Grid{}, fmt.Errorf("--sweep: more than %d cells", MaxCells)
		}
	}
	return Grid{Dimensions: dims}, nil
}

// Parse reads every specification, in order, into a grid.
func Parse(specs []string) (Grid, error) {
	if len(specs) > MaxDimensions {
		return Grid{}, fmt.Errorf("--sweep: %d dimensions, at most %d", len(specs), MaxDimensions)
	}
	dims := make([]Dimension, 0, len(specs))
	for _, s := range specs {
		d, err := ParseDimension(s)
		if err != nil {
			return Grid{}, err
		}
		dims = append(dims, d)
	}
	return New(dims)
}

// Cells is the number of cells: the product of the dimensions' sizes (1
// for a grid without dimensions).
func (g Grid) Cells() int {
	n := 1
	for _, d := range g.Dimensions {
		n *= len(d.Values)
	}
	return n
}

// Cell is cell i's coordinates, one per dimension in the grid's order.
// Cells are numbered as nested loops over the dimensions in the order
// given: the last dimension changes fastest.
func (g Grid) Cell(i int) ([]Coordinate, error) {
	n := g.Cells()
	if i < 0 || i >= n {
		return nil, fmt.Errorf("--cell %d: the grid has cells 0..%d", i, n-1)
	}
	out := make([]Coordinate, len(g.Dimensions))
	for k := len(g.Dimensions) - 1; k >= 0; k-- {
		d := g.Dimensions[k]
		out[k] = Coordinate{Name: d.Name, Value: d.Values[i%len(d.Values)]}
		i /= len(d.Values)
	}
	return out, nil
}

// Key is coordinates as one string, "seed=1,workers=8": how a merged
// report names a cell.
func Key(cs []Coordinate) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.Name + "=" + c.Value
	}
	return strings.Join(parts, ",")
}

// ID fingerprints a sweep: the command its cells share (every flag but
// the cell's own), so cells of different sweeps are never merged.
func ID(args []string) string {
	h := sha256.New()
	for _, a := range args {
		fmt.Fprintf(h, "%d:%s\n", len(a), a)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
