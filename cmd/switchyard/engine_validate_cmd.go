package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/spf13/cobra"

	"switchyard/fakefleet/engine/perf"
	"switchyard/fakefleet/engine/validate"
	"switchyard/internal/groundtruth"
	"switchyard/internal/progress"
	"switchyard/profiles"
)

func init() { registerEngine(newEngineValidateCmd) }

type engineValidateFlags struct {
	profile, jsonOut string
	seed             uint64
	seeds, parallel  int
}

func newEngineValidateCmd() *cobra.Command {
	var f engineValidateFlags
	cmd := &cobra.Command{
		Use:   "validate DIR... [--profile P] [--json OUT] [--seed S] [--seeds N]",
		Short: "Simulate ground-truth experiments and print the model's errors beside other simulators'",
		Long: "Simulate every experiment folder given (experiment.json, schema switchyard-groundtruth/v1;\n" +
			"a folder of experiment folders stands for each of them) on the engine model in virtual time,\n" +
			"and print per experiment the absolute percentage errors of TTFT mean and p90, E2E mean and\n" +
			"p90 and TPOT at the summary level, then MAPE and MPE over the experiments, next to the\n" +
			"baselines stored in the experiments. An experiment that cannot be simulated is listed with\n" +
			"the reason. --json writes the predictions (docs/engine-model.md). --seeds N runs seeds\n" +
			"S..S+N-1 and reports the spread; the JSON holds seed S's predictions.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return engineValidate(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.profile, "profile", profiles.CalibratedName, "timing profile: calibrated (the step-time model with the shipped fitted coefficients, profiles/calibrated.json), mocker (Dynamo's mocker polynomial), roofline (the step-time model with generic coefficients) or a profile file; a profile's coefficients price every experiment's own deployment")
	fl.StringVar(&f.jsonOut, "json", "", "write the predictions to this file")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the synthesized prompts and arrivals")
	fl.IntVar(&f.seeds, "seeds", 1, "run this many seeds from --seed and report the spread")
	fl.IntVar(&f.parallel, "parallel", runtime.GOMAXPROCS(0), "experiments simulated at once")
	return cmd
}

// profileConfigure maps a --profile value to the setup of each experiment:
// the mocker polynomial, or the step-time model of each experiment's own
// deployment (model, GPU, TP, vLLM settings) priced by the coefficients
// and overheads of the shipped calibrated profile, the built-in defaults
// (roofline) or a profile file.
func profileConfigure(name string) (validate.Configure, error) {
	switch name {
	case "mocker":
		return validate.Mocker, nil
	case "roofline":
		return validate.Profiled(defaultBaseProfile()), nil
	case profiles.CalibratedName:
		p, err := profiles.Calibrated()
		if err != nil {
			return nil, err
		}
		return validate.Profiled(p), nil
	}
	p, err := perf.LoadProfile(name)
	if err != nil {
		return nil, fmt.Errorf("--profile %q is neither calibrated, mocker, roofline nor a readable profile file: %w", name, err)
	}
	return validate.Profiled(p), nil
}

// defaultBaseProfile carries the generic coefficients (not fitted) and the
// generic client overhead of the shipped profile.
func defaultBaseProfile() perf.Profile {
	return perf.Profile{Coefficients: perf.DefaultCoefficients, Overheads: perf.Overheads{RequestMs: 10}}
}

// validateCase is one experiment folder and what became of it.
type validateCase struct {
	dir    string
	exp    *groundtruth.Experiment
	setup  validate.Setup
	reason string // why it was not simulated
	preds  []validate.Prediction
}

func engineValidate(stdout, stderr io.Writer, args []string, f engineValidateFlags) error {
	if f.seeds < 1 || f.seeds > 1000 {
		return &exitError{1, fmt.Errorf("--seeds must be in 1..1000")}
	}
	configure, err := profileConfigure(f.profile)
	if err != nil {
		return &exitError{1, err}
	}
	dirs, err := groundtruth.Expand(args)
	if err != nil {
		return &exitError{1, err}
	}
	cases := prepareCases(dirs, configure, f.seeds)
	if err := simulateCases(stderr, cases, f); err != nil {
		return err
	}
	printValidation(stdout, cases, f)
	if f.jsonOut != "" {
		return writePredictions(f.jsonOut, cases, f)
	}
	return nil
}

// prepareCases loads every folder and chooses its setup; a folder that
// cannot be read or simulated keeps the reason instead.
func prepareCases(dirs []string, configure validate.Configure, seeds int) []*validateCase {
	cases := make([]*validateCase, len(dirs))
	for i, dir := range dirs {
		c := &validateCase{dir: dir}
		cases[i] = c
		exp, err := groundtruth.Load(dir)
		if err != nil {
			c.reason = err.Error()
			continue
		}
		c.exp = exp
		if err := validate.Check(exp); err != nil {
			c.reason = err.Error()
			continue
		}
		if c.setup, err = configure(exp); err != nil {
			c.reason = err.Error()
			continue
		}
		c.preds = make([]validate.Prediction, seeds)
	}
	return cases
}

// simulateCases runs every (experiment, seed) pair, at most --parallel at
// once, with a progress bar counting ended requests.
func simulateCases(stderr io.Writer, cases []*validateCase, f engineValidateFlags) error {
	total := int64(0)
	for _, c := range cases {
		if c.reason == "" {
			total += int64(validate.RequestCount(c.exp) * f.seeds)
		}
	}
	bar := progress.New(stderr, total, "simulating experiments")
	defer bar.Finish()
	sem := make(chan struct{}, max(f.parallel, 1))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for _, c := range cases {
		if c.reason != "" {
			continue
		}
		for s := range f.seeds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				pred, err := validate.RunWithProgress(c.exp, c.setup, f.seed+uint64(s), func(n int) { bar.Add(int64(n)) })
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("%s: %w", c.exp.ID, err)
				}
				c.preds[s] = pred
			}()
		}
	}
	wg.Wait()
	return firstErr
}

func writePredictions(path string, cases []*validateCase, f engineValidateFlags) error {
	out := struct {
		Simulator    string                         `json:"simulator"`
		Experiments  map[string]validate.Prediction `json:"experiments"`
		NotSimulated map[string]string              `json:"not_simulated,omitempty"`
	}{Simulator: simulatorName(f), Experiments: map[string]validate.Prediction{}, NotSimulated: map[string]string{}}
	for _, c := range cases {
		if c.reason != "" {
			out.NotSimulated[caseName(c)] = c.reason
			continue
		}
		out.Experiments[c.exp.ID] = c.preds[0]
	}
	data, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// simulatorName is "switchyard@<commit> <flags>", as the scorer expects.
func simulatorName(f engineValidateFlags) string {
	rev := version
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				rev = s.Value[:min(12, len(s.Value))]
			}
		}
	}
	return fmt.Sprintf("switchyard@%s --profile %s --seed %d", rev, f.profile, f.seed)
}

func caseName(c *validateCase) string {
	if c.exp != nil {
		return c.exp.ID
	}
	return filepath.Base(c.dir)
}
