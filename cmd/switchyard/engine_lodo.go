package main

import (
	"fmt"
	"io"

	"switchyard/fakefleet/engine/perf"
	"switchyard/fakefleet/engine/validate"
	"switchyard/internal/groundtruth"
	"switchyard/internal/progress"
)

// lodoBaseline is the stored simulator the leave-one-deployment-out table
// sets beside ours.
const lodoBaseline = "blis_trained_physics"

// lodoFold is one deployment left out: its experiments, the profile fitted
// on all the others, and its experiments' errors under that profile and
// under the mocker.
type lodoFold struct {
	key         string
	cases       []validate.FitCase
	fitted      perf.Profile
	ours, mockr []validate.PE
}

// deploymentKey groups experiments that ran the same model on the same
// GPUs in the same layout.
func deploymentKey(p perf.Profile) string {
	return fmt.Sprintf("%s on %d× %s (tp %d, dp %d)", p.Model.HFName, p.TP*p.DP, p.GPU.HardwareKey, p.TP, p.DP)
}

// engineLODO fits once per deployment on every other one (at --scale,
// --max-evals, from the generic coefficients or --base's) and predicts
// the deployment's experiments at full scale.
func engineLODO(stdout, stderr io.Writer, exps []*groundtruth.Experiment, unused map[string]string, base *perf.Profile, f engineFitFlags) error {
	all, skipped := newFitCalibration(exps, base, 1, f)
	for id, why := range skipped {
		unused[id] = why
	}
	folds := groupFolds(all.Cases)
	if len(folds) < 2 {
		printUnused(stdout, unused)
		return &exitError{1, fmt.Errorf("leave-one-deployment-out needs experiments of at least two deployments, have %d", len(folds))}
	}
	bar := progress.New(stderr, int64(len(folds)*f.evalBudget()), "leave-one-deployment-out fits")
	for _, fold := range folds {
		if err := runFold(bar, fold, exps, base, f); err != nil {
			bar.Finish()
			return err
		}
	}
	bar.Finish()
	printLODO(stdout, folds, f)
	printUnused(stdout, unused)
	return nil
}

func groupFolds(cases []validate.FitCase) []*lodoFold {
	var folds []*lodoFold
	byKey := map[string]*lodoFold{}
	for _, fc := range cases {
		k := deploymentKey(fc.Deployment)
		if byKey[k] == nil {
			byKey[k] = &lodoFold{key: k}
			folds = append(folds, byKey[k])
		}
		byKey[k].cases = append(byKey[k].cases, fc)
	}
	return folds
}

// runFold fits on every experiment outside fold and scores fold's.
func runFold(bar *progress.Bar, fold *lodoFold, exps []*groundtruth.Experiment, base *perf.Profile, f engineFitFlags) error {
	left := map[*groundtruth.Experiment]bool{}
	for _, fc := range fold.cases {
		left[fc.Exp] = true
	}
	var train []*groundtruth.Experiment
	for _, exp := range exps {
		if !left[exp] {
			train = append(train, exp)
		}
	}
	cal, _ := newFitCalibration(train, base, f.scale, f)
	fitted, err := fitWithBar(bar, cal, startProfile(base, cal), f)
	if err != nil {
		return err
	}
	fold.fitted = fitted
	test := &validate.Calibration{Cases: fold.cases, Seed: f.seed, Parallel: max(f.parallel, 1)}
	if fold.ours, err = test.Errors(fitted); err != nil {
		return &exitError{1, err}
	}
	for _, fc := range fold.cases {
		pe, err := mockerErrors(fc.Exp, f.seed)
		if err != nil {
			return &exitError{1, fmt.Errorf("%s: mocker: %w", fc.Exp.ID, err)}
		}
		fold.mockr = append(fold.mockr, pe)
	}
	return nil
}

func mockerErrors(exp *groundtruth.Experiment, seed uint64) (validate.PE, error) {
	setup, err := validate.Mocker(exp)
	if err != nil {
		return validate.PE{}, err
	}
	pred, err := validate.Run(exp, setup, seed)
	if err != nil {
		return validate.PE{}, err
	}
	return validate.Score(exp, pred).Summary, nil
}

func printLODO(w io.Writer, folds []*lodoFold, f engineFitFlags) {
	fmt.Fprintf(w, "Leave-one-deployment-out: each deployment predicted at full scale by a fit on the others (scale %g, %d evaluations per search, %d restarts at most, seed %d)\n\n",
		f.scale, f.maxEvals, f.restarts, f.seed)
	fmt.Fprintf(w, "%s\n", metricHeader("| experiment | simulator |", "|---|---|"))
	var oursE, mockr, oursB, blis []validate.PE
	for _, fold := range folds {
		for i, fc := range fold.cases {
			fmt.Fprintf(w, "| %s | %s |%s\n", fc.Exp.ID, ours, apeCells(fold.ours[i]))
			if e, ok := validate.ScoreBaseline(fc.Exp, lodoBaseline); ok {
				fmt.Fprintf(w, "| | %s |%s\n", lodoBaseline, apeCells(e.Summary))
				oursB, blis = append(oursB, fold.ours[i]), append(blis, e.Summary)
			}
			fmt.Fprintf(w, "| | mocker |%s\n", apeCells(fold.mockr[i]))
			oursE, mockr = append(oursE, fold.ours[i]), append(mockr, fold.mockr[i])
		}
	}
	fmt.Fprintf(w, "\nMAPE %% (MPE %%) over experiments, summary level\n\n%s\n", metricHeader("| simulator | experiments |", "|---|---:|"))
	fmt.Fprintf(w, "| %s (LODO) | %d (all simulated) |%s\n", ours, len(oursE), aggregateCells(validate.Summarize(oursE)))
	fmt.Fprintf(w, "| mocker | %d (all simulated) |%s\n", len(mockr), aggregateCells(validate.Summarize(mockr)))
	fmt.Fprintf(w, "| %s (LODO) | %d (where %s has figures) |%s\n", ours, len(oursB), lodoBaseline, aggregateCells(validate.Summarize(oursB)))
	fmt.Fprintf(w, "| %s | %d |%s\n", lodoBaseline, len(blis), aggregateCells(validate.Summarize(blis)))
	header, rule := coefficientHeader("| deployment left out |", "|---|")
	fmt.Fprintf(w, "\nCoefficients per fold (fitted without the deployment)\n\n%s loss | evaluations |\n%s---:|---:|\n", header, rule)
	for _, fold := range folds {
		fmt.Fprintf(w, "| %s |%s %.2f | %d |\n", fold.key, coefficientCells(fold.fitted), fold.fitted.Fit.Objective, fold.fitted.Fit.Evaluations)
	}
}
