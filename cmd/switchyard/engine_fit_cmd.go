package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"switchyard/fakefleet/engine/perf"
	"switchyard/fakefleet/engine/validate"
	"switchyard/internal/groundtruth"
	"switchyard/internal/progress"
)

func init() { registerEngine(newEngineFitCmd) }

type engineFitFlags struct {
	out, base, date string
	scale           float64
	parallel        int
	maxEvals        int
	restarts        int
	seed            uint64
	exclude, params []string
	lodo            bool
}

// lossDescription is recorded in a fitted profile: what its objective is.
var lossDescription = fmt.Sprintf("mean over experiments of the mean summary-level APE of E2E mean, TTFT mean and TPOT, "+
	"plus the mean over those metrics of |MPE|; each error capped at ±%d %%", validate.LossAPECap)

func newEngineFitCmd() *cobra.Command {
	var f engineFitFlags
	cmd := &cobra.Command{
		Use:   "fit DIR... --out PROFILE.json [--base P] [--scale F] [--parallel N] [--max-evals N] [--restarts N] [--exclude ID...]",
		Short: "Fit the step-time model's coefficients to ground-truth experiments",
		Long: "Fit the step-time model's coefficients and client overhead (docs/engine-model.md) so that\n" +
			"simulating every experiment given (experiment folders, or folders of them) on its own\n" +
			"deployment matches the measurements: a deterministic Nelder-Mead search minimising the mean\n" +
			"APE of E2E mean, TTFT mean and TPOT plus their |MPE|. Each evaluation simulates the\n" +
			"inference-perf stages shortened to --scale of their requests (same rates); the result is\n" +
			"then checked on the whole workloads and its errors printed. --out writes --base (or the\n" +
			"first experiment's deployment) with the fitted coefficients and a fit record.\n" +
			"--lodo instead fits once per deployment (model, GPU, TP) on all the others, predicts the\n" +
			"one left out at full scale, and prints the leave-one-deployment-out table.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return engineFit(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "", "write the fitted profile to this file")
	fl.StringVar(&f.base, "base", "", "profile file to start from and to carry the coefficients (default: the generic coefficients on the first experiment's deployment)")
	fl.Float64Var(&f.scale, "scale", 0.1, "share of each inference-perf stage's requests simulated per evaluation, in (0, 1]")
	fl.IntVar(&f.parallel, "parallel", runtime.GOMAXPROCS(0), "experiments simulated at once")
	fl.IntVar(&f.maxEvals, "max-evals", 300, "loss evaluations (simulations of every experiment) per fit")
	fl.IntVar(&f.restarts, "restarts", 0, "searches after the first, each from a fresh simplex around the best point; they stop at the first that does not improve (at most --max-evals each)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the synthesized prompts and arrivals")
	fl.StringSliceVar(&f.exclude, "exclude", nil, "experiment ids to leave out")
	fl.StringSliceVar(&f.params, "params", perf.FitParams, "coefficients to fit (allreduce_us, allreduce_step_us and allreduce_doubling_us need experiments at more than one TP size, pcie_collective_us and pcie_hop_us experiments on PCIe-linked GPUs, sampling_ns_per_logit models of more than one vocabulary size)")
	fl.StringVar(&f.date, "date", "", "date recorded in the fit record, YYYY-MM-DD (default: today, UTC)")
	fl.BoolVar(&f.lodo, "lodo", false, "leave-one-deployment-out validation instead of one fit")
	return cmd
}

func engineFit(stdout, stderr io.Writer, args []string, f engineFitFlags) error {
	if err := checkFitFlags(f); err != nil {
		return &exitError{1, err}
	}
	dirs, err := groundtruth.Expand(args)
	if err != nil {
		return &exitError{1, err}
	}
	exps, unused := loadFitExperiments(dirs, f.exclude)
	var base *perf.Profile
	if f.base != "" {
		p, err := perf.LoadProfile(f.base)
		if err != nil {
			return &exitError{1, err}
		}
		base = &p
	}
	if f.lodo {
		return engineLODO(stdout, stderr, exps, unused, base, f)
	}
	cal, skipped := newFitCalibration(exps, base, f.scale, f)
	for id, why := range skipped {
		unused[id] = why
	}
	if len(cal.Cases) == 0 {
		printUnused(stdout, unused)
		return &exitError{1, fmt.Errorf("no simulatable experiment to fit on")}
	}
	start := startProfile(base, cal)
	fitted, err := runFit(stderr, cal, start, f, "fitting")
	if err != nil {
		return err
	}
	full, errs, err := fullScaleErrors(exps, fitted, f)
	if err != nil {
		return err
	}
	fitted.Fit.FullScaleObjective = validate.Loss(errs)
	printFit(stdout, fitted, full, errs)
	printUnused(stdout, unused)
	if f.out == "" {
		return nil
	}
	data, err := fitted.Marshal()
	if err != nil {
		return err
	}
	return os.WriteFile(f.out, data, 0o644)
}

func checkFitFlags(f engineFitFlags) error {
	switch {
	case !(f.scale > 0 && f.scale <= 1):
		return fmt.Errorf("--scale %v: want a share in (0, 1]", f.scale)
	case f.maxEvals < 1 || f.maxEvals > 100000:
		return fmt.Errorf("--max-evals %d: want 1..100000", f.maxEvals)
	case f.restarts < 0 || f.restarts > 100:
		return fmt.Errorf("--restarts %d: want 0..100", f.restarts)
	case f.out == "" && !f.lodo:
		return fmt.Errorf("--out is required (or --lodo)")
	}
	if f.date != "" {
		if _, err := time.Parse(time.DateOnly, f.date); err != nil {
			return fmt.Errorf("--date %q: want YYYY-MM-DD", f.date)
		}
	}
	for _, p := range f.params {
		if !slices.Contains(perf.AllFitParams, p) {
			return fmt.Errorf("--params: unknown coefficient %q (one of %v)", p, perf.AllFitParams)
		}
	}
	return nil
}

// evalBudget is the most evaluations one fit may take: --max-evals for
// the first search and for each restart.
func (f engineFitFlags) evalBudget() int { return f.maxEvals * (1 + f.restarts) }

// loadFitExperiments reads every folder; those that do not load or are
// excluded are returned by name with the reason instead.
func loadFitExperiments(dirs, exclude []string) ([]*groundtruth.Experiment, map[string]string) {
	var exps []*groundtruth.Experiment
	unused := map[string]string{}
	for _, dir := range dirs {
		exp, err := groundtruth.Load(dir)
		switch {
		case err != nil:
			unused[dir] = err.Error()
		case slices.Contains(exclude, exp.ID):
			unused[exp.ID] = "excluded (--exclude)"
		default:
			exps = append(exps, exp)
		}
	}
	return exps, unused
}

// newFitCalibration prepares exps at scale; the coefficients are replaced
// by each evaluation, so any valid ones serve to size the deployments.
func newFitCalibration(exps []*groundtruth.Experiment, base *perf.Profile, scale float64, f engineFitFlags) (*validate.Calibration, map[string]string) {
	cal, skipped := validate.NewCalibration(exps, coefficientsOf(base), scale)
	cal.Seed, cal.Parallel = f.seed, max(f.parallel, 1)
	return cal, skipped
}

func coefficientsOf(base *perf.Profile) perf.Profile {
	if base != nil {
		return *base
	}
	return defaultBaseProfile()
}

// startProfile is the profile the fit starts from and writes: --base, or
// the first experiment's deployment with the generic coefficients.
func startProfile(base *perf.Profile, cal *validate.Calibration) perf.Profile {
	if base != nil {
		p := *base
		p.Fit = nil
		return p
	}
	p := cal.Cases[0].Deployment
	d := defaultBaseProfile()
	p.Coefficients, p.Overheads = d.Coefficients, d.Overheads
	p.Name = "calibrated"
	p.Description = fmt.Sprintf("Coefficients fitted by switchyard engine fit on %d experiments (see fit); the model, hardware and engine settings are those of %s.",
		len(cal.Cases), cal.Cases[0].Exp.ID)
	return p
}

// runFit fits start on cal with a progress bar counting evaluations, and
// completes the fit record.
func runFit(stderr io.Writer, cal *validate.Calibration, start perf.Profile, f engineFitFlags, label string) (perf.Profile, error) {
	bar := progress.New(stderr, int64(f.evalBudget()), label)
	defer bar.Finish()
	return fitWithBar(bar, cal, start, f)
}

func fitWithBar(bar *progress.Bar, cal *validate.Calibration, start perf.Profile, f engineFitFlags) (perf.Profile, error) {
	fitted, err := cal.Fit(start, perf.FitOptions{Params: f.params, MaxEvals: f.maxEvals, Restarts: f.restarts}, func(float64) { bar.Add(1) })
	if err != nil {
		return perf.Profile{}, &exitError{1, err}
	}
	fitted.Fit.Loss = lossDescription
	fitted.Fit.Scale, fitted.Fit.Seed = f.scale, f.seed
	fitted.Fit.Date = f.date
	if fitted.Fit.Date == "" {
		fitted.Fit.Date = time.Now().UTC().Format(time.DateOnly)
	}
	return fitted, nil
}

// fullScaleErrors simulates exps whole with p's coefficients.
func fullScaleErrors(exps []*groundtruth.Experiment, p perf.Profile, f engineFitFlags) (*validate.Calibration, []validate.PE, error) {
	full, _ := newFitCalibration(exps, &p, 1, f)
	errs, err := full.Errors(p)
	if err != nil {
		return nil, nil, &exitError{1, err}
	}
	return full, errs, nil
}

func printFit(w io.Writer, p perf.Profile, full *validate.Calibration, errs []validate.PE) {
	fmt.Fprintf(w, "Fitted on %d experiments (scale %g, seed %d, %d evaluations, %d restarts): loss %.2f at scale, %.2f at full scale\n\n",
		len(p.Fit.Experiments), p.Fit.Scale, p.Fit.Seed, p.Fit.Evaluations, p.Fit.Restarts, p.Fit.Objective, p.Fit.FullScaleObjective)
	header, rule := coefficientHeader("|", "|")
	fmt.Fprintf(w, "%s\n%s\n|%s\n", header, rule, coefficientCells(p))
	fmt.Fprintf(w, "\nSummary-level APE %% at full scale\n\n%s\n", metricHeader("| experiment |", "|---|"))
	for i, fc := range full.Cases {
		fmt.Fprintf(w, "| %s |%s\n", fc.Exp.ID, apeCells(errs[i]))
	}
	fmt.Fprintf(w, "\nMAPE %% (MPE %%)\n\n%s\n| %d |%s\n", metricHeader("| experiments |", "|---:|"), len(errs), aggregateCells(validate.Summarize(errs)))
}

func metricHeader(header, rule string) string {
	for m := range validate.NumMetrics {
		header += " " + m.String() + " |"
		rule += "---:|"
	}
	return header + "\n" + rule
}

func printUnused(w io.Writer, unused map[string]string) {
	if len(unused) == 0 {
		return
	}
	fmt.Fprintf(w, "\nNot used\n\n")
	names := make([]string, 0, len(unused))
	for n := range unused {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "- %s: %s\n", n, unused[n])
	}
}

// coefficientColumns are the fitted numbers a fit's and a fold's tables
// show, under their profile names.
var coefficientColumns = []struct {
	name string
	prec int
	get  func(perf.Profile) float64
}{
	{"matmul_efficiency", 3, func(p perf.Profile) float64 { return p.Coefficients.MatmulEfficiency }},
	{"attention_efficiency", 3, func(p perf.Profile) float64 { return p.Coefficients.AttentionEfficiency }},
	{"bandwidth_efficiency", 3, func(p perf.Profile) float64 { return p.Coefficients.BandwidthEfficiency }},
	{"kv_bandwidth_efficiency", 3, func(p perf.Profile) float64 { return p.Coefficients.KVBandwidthEfficiency }},
	{"step_overhead_us", 0, func(p perf.Profile) float64 { return p.Coefficients.StepOverheadUs }},
	{"seq_overhead_us", 1, func(p perf.Profile) float64 { return p.Coefficients.SeqOverheadUs }},
	{"allreduce_us", 1, func(p perf.Profile) float64 { return p.Coefficients.AllReduceUs }},
	{"allreduce_step_us", 1, func(p perf.Profile) float64 { return p.Coefficients.AllReduceStepUs }},
	{"allreduce_doubling_us", 1, func(p perf.Profile) float64 { return p.Coefficients.AllReduceDoublingUs }},
	{"pcie_collective_us", 1, func(p perf.Profile) float64 { return p.Coefficients.PCIeCollectiveUs }},
	{"pcie_hop_us", 1, func(p perf.Profile) float64 { return p.Coefficients.PCIeHopUs }},
	{"sampling_ns_per_logit", 3, func(p perf.Profile) float64 { return p.Coefficients.SamplingNsPerLogit }},
	{"request_ms", 1, func(p perf.Profile) float64 { return p.Overheads.RequestMs }},
}

// coefficientHeader is the header and rule rows of coefficientColumns
// after the given leading cells.
func coefficientHeader(header, rule string) (string, string) {
	for _, c := range coefficientColumns {
		header += " " + c.name + " |"
		rule += "---:|"
	}
	return header, rule
}

// coefficientCells is p's row of coefficientColumns, each cell closed.
func coefficientCells(p perf.Profile) string {
	var b strings.Builder
	for _, c := range coefficientColumns {
		fmt.Fprintf(&b, " %.*f |", c.prec, c.get(p))
	}
	return b.String()
}
