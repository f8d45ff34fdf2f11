package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"switchyard/fakefleet/engine/validate"
)

// ours names our rows in the tables.
const ours = "switchyard"

// printValidation prints, as Markdown tables: each simulated experiment's
// summary-level APEs (ours, then each stored baseline), MAPE and MPE over
// the experiments (ours beside each baseline on the experiments that
// baseline covers), the seed spread, and the experiments not simulated.
func printValidation(w io.Writer, cases []*validateCase, f engineValidateFlags) {
	header := "| experiment | simulator |"
	rule := "|---|---|"
	for m := range validate.NumMetrics {
		header += " " + m.String() + " |"
		rule += "---:|"
	}
	fmt.Fprintf(w, "Summary-level APE %% (profile %s, seed %d)\n\n%s\n%s\n", f.profile, f.seed, header, rule)
	baselines := baselineNames(cases)
	for _, c := range cases {
		if c.reason != "" {
			continue
		}
		fmt.Fprintf(w, "| %s | %s |%s\n", c.exp.ID, ours, apeCells(validate.Score(c.exp, c.preds[0]).Summary))
		for _, b := range baselines {
			if e, ok := validate.ScoreBaseline(c.exp, b); ok {
				fmt.Fprintf(w, "| | %s |%s\n", b, apeCells(e.Summary))
			}
		}
	}
	printAggregates(w, cases, baselines)
	if f.seeds > 1 {
		printSeedSpread(w, cases, f)
	}
	printNotSimulated(w, cases)
}

func apeCells(pe validate.PE) string {
	var b strings.Builder
	for _, v := range pe {
		if math.IsNaN(v) {
			b.WriteString(" – |")
		} else {
			fmt.Fprintf(&b, " %.1f |", math.Abs(v))
		}
	}
	return b.String()
}

// aggregateCells shows "MAPE (MPE)" per metric.
func aggregateCells(a validate.Aggregate) string {
	var b strings.Builder
	for m := range validate.NumMetrics {
		if a.N[m] == 0 {
			b.WriteString(" – |")
		} else {
			fmt.Fprintf(&b, " %.1f (%+.1f) |", a.MAPE[m], a.MPE[m])
		}
	}
	return b.String()
}

// baselineNames lists the stored baselines, BLIS's default model first.
func baselineNames(cases []*validateCase) []string {
	seen := map[string]bool{}
	for _, c := range cases {
		if c.reason == "" {
			for name := range c.exp.Baselines {
				seen[name] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if (a == "blis_trained_physics") != (b == "blis_trained_physics") {
			if a == "blis_trained_physics" {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return names
}

func printAggregates(w io.Writer, cases []*validateCase, baselines []string) {
	header := "| simulator | experiments |"
	rule := "|---|---:|"
	for m := range validate.NumMetrics {
		header += " " + m.String() + " |"
		rule += "---:|"
	}
	fmt.Fprintf(w, "\nMAPE %% (MPE %%) over experiments, summary level\n\n%s\n%s\n", header, rule)
	var all []validate.PE
	for _, c := range cases {
		if c.reason == "" {
			all = append(all, validate.Score(c.exp, c.preds[0]).Summary)
		}
	}
	fmt.Fprintf(w, "| %s | %d (all simulated) |%s\n", ours, len(all), aggregateCells(validate.Summarize(all)))
	for _, b := range baselines {
		var mine, theirs []validate.PE
		for _, c := range cases {
			if c.reason != "" {
				continue
			}
			if e, ok := validate.ScoreBaseline(c.exp, b); ok {
				theirs = append(theirs, e.Summary)
				mine = append(mine, validate.Score(c.exp, c.preds[0]).Summary)
			}
		}
		fmt.Fprintf(w, "| %s | %d (where %s has figures) |%s\n", ours, len(mine), b, aggregateCells(validate.Summarize(mine)))
		fmt.Fprintf(w, "| %s | %d |%s\n", b, len(theirs), aggregateCells(validate.Summarize(theirs)))
	}
}

// printSeedSpread shows how much the errors move with the seed: per metric,
// the range of MAPE over seeds and the widest range of one experiment's APE.
func printSeedSpread(w io.Writer, cases []*validateCase, f engineValidateFlags) {
	fmt.Fprintf(w, "\nSpread over seeds %d..%d\n\n", f.seed, f.seed+uint64(f.seeds)-1)
	if !slices.ContainsFunc(cases, func(c *validateCase) bool { return c.reason == "" }) {
		fmt.Fprintf(w, "No experiment was simulated.\n")
		return
	}
	fmt.Fprintf(w, "| metric | MAPE min | MAPE max | widest experiment range |\n|---|---:|---:|---:|\n")
	perSeed := make([]validate.Aggregate, f.seeds)
	for s := range f.seeds {
		var errs []validate.PE
		for _, c := range cases {
			if c.reason == "" {
				errs = append(errs, validate.Score(c.exp, c.preds[s]).Summary)
			}
		}
		perSeed[s] = validate.Summarize(errs)
	}
	for m := range validate.NumMetrics {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, a := range perSeed {
			lo, hi = math.Min(lo, a.MAPE[m]), math.Max(hi, a.MAPE[m])
		}
		widest := 0.0
		for _, c := range cases {
			if c.reason != "" {
				continue
			}
			elo, ehi := math.Inf(1), math.Inf(-1)
			for s := range f.seeds {
				v := math.Abs(validate.Score(c.exp, c.preds[s]).Summary[m])
				elo, ehi = math.Min(elo, v), math.Max(ehi, v)
			}
			if ehi-elo > widest {
				widest = ehi - elo
			}
		}
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %.2f |\n", m, lo, hi, widest)
	}
}

func printNotSimulated(w io.Writer, cases []*validateCase) {
	first := true
	for _, c := range cases {
		if c.reason == "" {
			continue
		}
		if first {
			fmt.Fprintf(w, "\nNot simulated\n\n")
			first = false
		}
		fmt.Fprintf(w, "- %s: %s\n", caseName(c), c.reason)
	}
}
