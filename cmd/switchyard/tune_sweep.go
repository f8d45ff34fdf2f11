package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"switchyard/internal/progress"
	"switchyard/reports"
	"switchyard/router/picker"
	"switchyard/sim/stats"
	"switchyard/sim/tune"
	"switchyard/sweep"
)

// tuneSweepable are the flags a tune sweep may vary besides its knob grid.
var tuneSweepable = sweepableFlags("seed", "workers", "trace", "recording", "fleet", "scenario", "profile", "limit", "speedup")

// tuneKnobs names the knob dimension of a tune sweep: its values are "current" (the
// settings the cell reads from --config, the scenario or the defaults) and every
// "prefill_load_scale/overlap_score_credit" point of the search's coarse grid.
const tuneKnobs = "prefill_load_scale/overlap_score_credit"

// currentKnobs is the knob value of the current settings.
const currentKnobs = "current"

// tuneKnobDimension is the coarse grid as a sweep dimension, the current settings first, as
// the search evaluates them.
func tuneKnobDimension() sweep.Dimension {
	scales, credits := tune.CoarseGrid()
	d := sweep.Dimension{Name: tuneKnobs, Values: []string{currentKnobs}}
	for _, c := range credits {
		for _, s := range scales {
			d.Values = append(d.Values, fmtKnob(s)+"/"+fmtKnob(c))
		}
	}
	return d
}

// parseKnobs reads a knob value other than "current".
func parseKnobs(v string) (scale, credit float64, err error) {
	a, b, ok := strings.Cut(v, "/")
	if ok {
		scale, err = strconv.ParseFloat(a, 64)
		if err == nil {
			credit, err = strconv.ParseFloat(b, 64)
		}
	}
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("%s %q: want current or SCALE/CREDIT", tuneKnobs, v)
	}
	return scale, credit, nil
}

// tuneSweep handles tune's sweep flags: it writes the Job, or runs one cell.
func tuneSweep(cmd *cobra.Command, f tuneFlags) error {
	if _, err := tune.ParseObjective(f.objective); err != nil {
		return &exitError{1, fmt.Errorf("--objective: %w", err)}
	}
	plan, err := newSweepPlan(cmd, "tune", &f.sweep, tuneSweepable, newTuneCmd, tuneKnobDimension())
	if err != nil {
		return &exitError{1, err}
	}
	if f.sweep.emitJob != "" {
		return plan.emitJob(cmd.OutOrStdout(), cmd.Flags(), &f.sweep)
	}
	cell, err := plan.apply(cmd, f.sweep.cell, f.objective)
	if err != nil {
		return &exitError{1, err}
	}
	fl := cmd.Flags()
	f.bench.seedSet = fl.Changed("seed")
	f.sloSet = fl.Changed("slo-ttft") || fl.Changed("slo-itl")
	return tuneCell(cmd.OutOrStdout(), cmd.ErrOrStderr(), f, cell)
}

// tuneCell simulates the KV-aware picker at one point of the coarse grid and writes a report
// folder with that one run, "kv".
func tuneCell(stdout, stderr io.Writer, f tuneFlags, cell *reports.Cell) error {
	in, objective, err := tunePrepare(f)
	if err != nil {
		return err
	}
	settings := tune.SettingsOf(in.sc.Router.KV)
	if knobs := cell.Coordinates[len(cell.Coordinates)-1].Value; knobs != currentKnobs {
		if settings.PrefillLoadScale, settings.OverlapScoreCredit, err = parseKnobs(knobs); err != nil {
			return &exitError{1, err}
		}
	}
	fmt.Fprint(stderr, in.warning)
	kv := settings.Apply(in.sc.Router.KV)
	bar := progress.New(stderr, int64(in.requests), "simulating one grid point")
	w := tune.Workload{Scenario: in.sc, Source: in.source, Progress: func(n int) { bar.Add(int64(n)) }}
	sum, err := w.Run(picker.NameKV, kv)
	bar.Finish()
	if err != nil {
		return err
	}
	sc := *in.sc
	sc.Router.KV = kv
	setup := setupOf(in.sc)
	cmp := reports.Comparison{Title: "Tuning the KV-aware picker: " + string(objective) + ", one grid point", Trace: in.name,
		Fleet: setup.Describe(), Setup: setup, Seed: in.sc.Seed, SeedSource: in.seedSource, Generated: "switchyard " + version,
		SLO:     stats.SLO{TTFT: in.sc.SLO.TTFT.Std(), ITL: in.sc.SLO.ITL.Std()},
		Pickers: []reports.Run{{Name: picker.NameKV, Summary: sum, Router: runRouterOf(&sc)}}, Cell: cell}
	if err := reports.Write(f.bench.out, cmp); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cell %d of %d of sweep %s: %s\n", cell.Index, cell.Cells, cell.Sweep, sweep.Key(cell.Coordinates))
	fmt.Fprintf(stdout, "%s: %s\n", objective.Label(), strconv.FormatFloat(objective.Value(sum), 'f', 3, 64))
	fmt.Fprintf(stdout, "report: %s\n", filepath.Join(f.bench.out, "index.html"))
	return nil
}

// tuneFromSweep is what a tune sweep's grid recommends: each knob point's figure is its mean
// over the cells at that point (over seeds, say), the best point chosen as the search's grid
// stage chooses (the earliest of equals; a point that fails more requests than the current
// settings ranks below every one that does not). It returns the report's account and
// tuned.yaml.
func tuneFromSweep(s *reports.Sweep) (*reports.SweepTuned, []byte, error) {
	objective, err := tune.ParseObjective(s.Objective)
	if err != nil {
		return nil, nil, fmt.Errorf("the cells' objective: %w", err)
	}
	k := len(s.Dimensions) - 1
	if k < 0 || s.Dimensions[k].Name != tuneKnobs {
		return nil, nil, fmt.Errorf("a tune sweep's last dimension is %s", tuneKnobs)
	}
	type point struct {
		knobs          string
		settings       tune.Settings
		value, failed  float64
		cells          int
		representative reports.SweepCell
	}
	var points []*point
	byKnobs := map[string]*point{}
	for _, c := range s.Found {
		knobs := c.Coordinates()[k].Value
		sum, ok := c.Summary(picker.NameKV)
		block, okKV := c.RouterKV(picker.NameKV)
		if !ok || !okKV {
			return nil, nil, fmt.Errorf("%s: no %s run: not a tune cell", c.Source, picker.NameKV)
		}
		p := byKnobs[knobs]
		if p == nil {
			p = &point{knobs: knobs, representative: c, settings: tune.Settings{PrefillLoadScale: block.PrefillLoadScale,
				OverlapScoreCredit: block.OverlapScoreCredit, RouterTemperature: block.RouterTemperature,
				DecodeActiveRequestWeight: block.DecodeActiveRequestWeight, TrackActiveBlocks: block.TrackActiveBlocks,
				TrackPrefillTokens: block.TrackPrefillTokens}}
			byKnobs[knobs] = p
		}
		p.value += objective.Value(sum)
		p.failed += float64(sum.Failed)
		p.cells++
	}
	for _, v := range s.Dimensions[k].Values { // the grid's order, not the files'
		if p := byKnobs[v]; p != nil {
			p.value /= float64(p.cells)
			p.failed /= float64(p.cells)
			points = append(points, p)
		}
	}
	cur := byKnobs[currentKnobs]
	if cur == nil {
		return nil, nil, errors.New("every cell of the current settings is missing: there is nothing to measure a gain against")
	}
	better := func(a, b *point) bool {
		if fa, fb := a.failed > cur.failed, b.failed > cur.failed; fa != fb && objective != tune.Goodput {
			return fb
		}
		if objective.LowerIsBetter() {
			return a.value < b.value
		}
		return a.value > b.value
	}
	best := points[0]
	for _, p := range points[1:] {
		if better(p, best) {
			best = p
		}
	}
	t := &reports.Tuning{Objective: string(objective), Label: objective.Label(), LowerIsBetter: objective.LowerIsBetter(),
		Budget: len(points), Converged: false}
	for i, p := range points {
		phase := tune.PhaseGrid
		if p == cur {
			phase, t.Current = tune.PhaseCurrent, i
		}
		if p == best {
			t.Tuned = i
		}
		st := p.settings
		t.Points = append(t.Points, reports.TunePoint{PrefillLoadScale: st.PrefillLoadScale, OverlapScoreCredit: st.OverlapScoreCredit,
			RouterTemperature: st.RouterTemperature, DecodeActiveRequestWeight: st.DecodeActiveRequestWeight,
			TrackActiveBlocks: st.TrackActiveBlocks, TrackPrefillTokens: st.TrackPrefillTokens, Phase: phase, Value: p.value})
	}
	gain := 0.0
	if cur.value != 0 {
		gain = (best.value - cur.value) / cur.value
		if objective.LowerIsBetter() {
			gain = -gain
		}
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# switchyard reports merge of tune sweep %s, objective %s, on %s: %d grid points from %d of %d cells.\n",
		s.ID, objective, cur.representative.Trace(), len(points), len(s.Found), s.Cells)
	fmt.Fprintf(&b, "# %s: %s with the current settings, %s with these (%+.1f %%), averaged over each point's cells.\n",
		objective.Label(), fmtKnob(cur.value), fmtKnob(best.value), gain*100)
	if best == cur {
		b.WriteString("# Nothing on the grid beat the current settings: they are repeated here.\n")
	}
	b.WriteString("# The coarse grid only: `switchyard tune --from-merged <this folder>` refines around this point.\n")
	kvBlockYAML(&b, best.settings)
	return &reports.SweepTuned{Tuning: t, Current: cur.knobs, Tuned: best.knobs, Gain: gain}, b.Bytes(), nil
}
