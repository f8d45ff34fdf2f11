package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"switchyard/reports"
	"switchyard/router/picker"
	"switchyard/sim/stats"
	"switchyard/sim/tune"
	"switchyard/sweep"
)

// fromMergedFlags may be given beside --from-merged: everything else comes from the sweep's
// command, so that the search runs on the very workload the cells ran.
var fromMergedFlags = []string{"from-merged", "out", "parallel", "budget"}

// mergedGrid is what a merged tune sweep gives the search: the points its cells simulated.
type mergedGrid struct {
	sweep *reports.Sweep
	cells []reports.SweepCell // the cells of the workload refined
	known tune.Known
}

// tuneFromMerged continues a tune sweep's search on this machine: it sets the flags to the
// sweep's command (and its swept values to the ones chosen), reads the merged cells as known
// points, and runs the usual search, which simulates only what the cells did not.
func tuneFromMerged(cmd *cobra.Command, f *tuneFlags) error {
	fl := cmd.Flags()
	path := f.fromMerged
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, "summary.json")
	}
	s, err := reports.ReadMerged(path)
	if err != nil {
		return &exitError{1, fmt.Errorf("--from-merged: %w", err)}
	}
	k := len(s.Dimensions) - 1
	if s.Kind != "tune" || k < 0 || s.Dimensions[k].Name != tuneKnobs || len(s.Command) == 0 || s.Command[0] != "tune" {
		return &exitError{1, fmt.Errorf("--from-merged %s: a merged %s sweep, not a tune sweep: only a tune sweep's grid can be refined", path, s.Kind)}
	}
	choose := map[string]bool{} // dimensions of several values: the user picks one
	for _, d := range s.Dimensions[:k] {
		if len(d.Values) > 1 {
			choose[d.Name] = true
		}
	}
	var refused []string
	fl.Visit(func(p *pflag.Flag) {
		if !slices.Contains(fromMergedFlags, p.Name) && !choose[p.Name] {
			refused = append(refused, "--"+p.Name)
		}
	})
	if len(refused) > 0 {
		return &exitError{1, fmt.Errorf("%s: with --from-merged the workload, fleet and objective are the sweep's (%s); give only --out, --parallel, --budget and a value of each swept flag",
			strings.Join(refused, ", "), strings.Join(s.Command, " "))}
	}
	for _, a := range s.Command[1:] {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch {
		case !ok || !strings.HasPrefix(a, "--") || fl.Lookup(name) == nil || slices.Contains(jobOnlyFlags, name) ||
			slices.Contains(perCellFlags, name) || name == "from-merged":
			return &exitError{1, fmt.Errorf("--from-merged %s: sweep.command has %q, not a flag of a tune cell", path, a)}
		case name == "sweep" || fl.Changed(name): // the grid is read below; the user's --budget, --parallel win
			continue
		}
		if err := fl.Set(name, value); err != nil {
			return &exitError{1, fmt.Errorf("--from-merged %s: sweep.command %s: %w", path, a, err)}
		}
	}
	// The cells of one workload: each swept flag at its one value, or at the one chosen.
	chosen := make([]string, k)
	for i, d := range s.Dimensions[:k] {
		if !choose[d.Name] {
			chosen[i] = d.Values[0]
			if err := fl.Set(d.Name, chosen[i]); err != nil {
				return &exitError{1, fmt.Errorf("--from-merged %s: %s=%s: %w", path, d.Name, chosen[i], err)}
			}
			continue
		}
		if !fl.Changed(d.Name) {
			return &exitError{1, fmt.Errorf("the sweep varies --%s over %s: refine one of them with --%s V", d.Name, strings.Join(d.Values, ", "), d.Name)}
		}
		given := fl.Lookup(d.Name).Value.String()
		for _, v := range d.Values {
			probe := newTuneCmd().Flags()
			if probe.Set(d.Name, v) == nil && probe.Lookup(d.Name).Value.String() == given {
				chosen[i] = v
			}
		}
		if chosen[i] == "" {
			return &exitError{1, fmt.Errorf("--%s %s: the sweep ran %s only", d.Name, given, strings.Join(d.Values, ", "))}
		}
	}
	if f.objective != s.Objective {
		return &exitError{1, fmt.Errorf("--from-merged %s: the cells ranked by %q, the command says %q", path, s.Objective, f.objective)}
	}
	if f.budget < tune.FullGridBudget() {
		return &exitError{1, fmt.Errorf("--budget %d: refining a sweep's grid needs at least %d, the budget whose grid is the sweep's", f.budget, tune.FullGridBudget())}
	}
	g := &mergedGrid{sweep: s}
	for _, c := range s.Found {
		coords := c.Coordinates()
		if !slices.EqualFunc(coords[:k], chosen, func(c sweep.Coordinate, v string) bool { return c.Value == v }) {
			continue
		}
		sum, ok := c.Summary(picker.NameKV)
		block, okKV := c.RouterKV(picker.NameKV)
		if !ok || !okKV {
			return &exitError{1, fmt.Errorf("%s: no %s run: not a tune cell", c.Source, picker.NameKV)}
		}
		if err := g.known.Add(settingsOfBlock(block), sum); err != nil {
			return &exitError{1, fmt.Errorf("%s: %w", c.Source, err)}
		}
		g.cells = append(g.cells, c)
	}
	if len(g.cells) == 0 {
		return &exitError{1, fmt.Errorf("--from-merged %s: no cell of %s", path, strings.Join(chosen, ", "))}
	}
	f.bench.seedSet = fl.Changed("seed")
	f.sloSet = fl.Changed("slo-ttft") || fl.Changed("slo-itl")
	return tuneRun(cmd.OutOrStdout(), cmd.ErrOrStderr(), *f, g)
}

func settingsOfBlock(b reports.KVBlock) tune.Settings {
	return tune.Settings{PrefillLoadScale: b.PrefillLoadScale, OverlapScoreCredit: b.OverlapScoreCredit,
		RouterTemperature: b.RouterTemperature, DecodeActiveRequestWeight: b.DecodeActiveRequestWeight,
		TrackActiveBlocks: b.TrackActiveBlocks, TrackPrefillTokens: b.TrackPrefillTokens}
}

// check refuses a workload that is not the one the cells ran: another seed, another trace,
// other current settings (a file changed since the sweep).
func (g *mergedGrid) check(in *tuneInput) error {
	var errs []error
	for _, c := range g.cells {
		if c.Seed() != in.sc.Seed || c.Trace() != in.name {
			errs = append(errs, fmt.Errorf("%s ran %s on seed %d, this search %s on seed %d", c.Source, c.Trace(), c.Seed(), in.name, in.sc.Seed))
		}
		if c.Coordinates()[len(c.Coordinates())-1].Value != currentKnobs {
			continue
		}
		block, _ := c.RouterKV(picker.NameKV)
		if here := tune.SettingsOf(in.sc.Router.KV); settingsOfBlock(block) != here {
			errs = append(errs, fmt.Errorf("%s: its current settings are %s, here they are %s", c.Source,
				pointOf(tune.Evaluation{Settings: settingsOfBlock(block)}).Describe(), pointOf(tune.Evaluation{Settings: here}).Describe()))
		}
	}
	if len(errs) > 0 {
		return &exitError{1, fmt.Errorf("the files changed since the sweep ran: %w", errors.Join(errs...))}
	}
	return nil
}

// forReport gives an evaluation read from a cell its charts: summary.json keeps a run's
// figures, not its series, so the point is simulated here once more for the report. Its
// figures must be the cell's; when they are not, the cells ran other inputs, and it says so.
func (g *mergedGrid) forReport(e tune.Evaluation, eval tune.Evaluate, warn func(string)) (stats.Summary, error) {
	if g == nil || !g.known.Has(e.Settings) {
		return e.Summary, nil
	}
	sum, err := eval(e.Settings)
	if err != nil {
		return stats.Summary{}, err
	}
	r := func(p stats.Percentiles) [3]float64 { return [3]float64{round6(p.P50), round6(p.P90), round6(p.P99)} }
	if sum.Requests != e.Summary.Requests || sum.Failed != e.Summary.Failed || r(sum.TTFT) != r(e.Summary.TTFT) ||
		r(sum.E2E) != r(e.Summary.E2E) || round6(sum.HitRatio) != round6(e.Summary.HitRatio) {
		warn(fmt.Sprintf("warning: %s simulates here to other figures than its sweep cell's (TTFT p90 %s ms, cell %s ms): the cells ran other inputs or another version\n",
			pointOf(e).Describe(), fmtKnob(sum.TTFT.P90), fmtKnob(e.Summary.TTFT.P90)))
	}
	return sum, nil
}

// reused counts the search's evaluations read from the cells.
func (g *mergedGrid) reused(r *tune.Result) int {
	n := 0
	for _, e := range r.Evaluations {
		if g.known.Has(e.Settings) {
			n++
		}
	}
	return n
}

// reportRuns counts the points simulated again for the report's charts.
func (g *mergedGrid) reportRuns(r *tune.Result) int {
	n := 0
	if g.known.Has(r.Evaluations[r.Current].Settings) {
		n++
	}
	if r.Best != r.Current && g.known.Has(r.Evaluations[r.Best].Settings) {
		n++
	}
	return n
}
