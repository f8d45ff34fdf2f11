package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"switchyard/internal/progress"
	"switchyard/recorder"
	"switchyard/reports"
	"switchyard/router/config"
	"switchyard/router/coreconfig"
	"switchyard/router/picker"
	"switchyard/sim"
	"switchyard/sim/replay"
	"switchyard/sim/stats"
	"switchyard/sim/tune"
	"switchyard/sim/workload"
)

func init() { register(newTuneCmd) }

type tuneFlags struct {
	bench     benchPickersFlags // --trace, --scenario, --fleet, --workers, --profile, --seed, --out, --limit, --speedup, --parallel, --slo-*
	recording string
	runID     int64
	config    string
	objective string
	budget    int
	sloSet    bool // --slo-ttft or --slo-itl was given
	sweep     sweepFlags
	// fromMerged is a merged tune sweep whose grid the search continues from.
	fromMerged string
}

func newTuneCmd() *cobra.Command {
	var f tuneFlags
	cmd := &cobra.Command{
		Use:   "tune (--trace FILE (--fleet FILE | --workers N) | --recording FILE [--fleet FILE | --workers N] | --scenario FILE)",
		Short: "Search the KV-aware picker's knobs in the simulator on your own traffic",
		Long: "Simulate the workload under many dynamo.kv settings (prefill_load_scale, Dynamo's\n" +
			"kv_overlap_score_weight; overlap_score_credit; router_temperature;\n" +
			"decode_active_request_weight; track_active_blocks and track_prefill_tokens) and\n" +
			"recommend the one that serves it best under --objective. The search starts from\n" +
			"the current settings (--config FILE's dynamo.kv, else the scenario's router.kv,\n" +
			"else the defaults), walks a coarse grid and refines around the best point\n" +
			"(docs/tune.md); the same inputs and seed give the same result on any number of\n" +
			"cores. --out gets tuned.yaml (the recommended dynamo.kv block), search.json (every\n" +
			"evaluated setting in order) and a report folder whose summary.json has the\n" +
			"bench pickers schema with round_robin, kv (current) and kv_tuned.\n" +
			"--emit-job DIR spreads the coarse grid (× any --sweep NAME=V1,V2,...) over a\n" +
			"Kubernetes Indexed Job instead, one grid point per cell (--cell N runs one here);\n" +
			"`switchyard reports merge` then recommends from the grid, and --from-merged DIR\n" +
			"continues the search here from that grid, simulating only the refinement\n" +
			"(docs/sweeps.md).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("from-merged") {
				return tuneFromMerged(cmd, &f)
			}
			if f.sweep.active(cmd.Flags()) {
				return tuneSweep(cmd, f)
			}
			fl := cmd.Flags()
			f.bench.seedSet = fl.Changed("seed")
			f.sloSet = fl.Changed("slo-ttft") || fl.Changed("slo-itl")
			return tuneRun(cmd.OutOrStdout(), cmd.ErrOrStderr(), f, nil)
		},
	}
	fl := cmd.Flags()
	b := &f.bench
	fl.StringVar(&b.trace, "trace", "", "Mooncake JSONL trace to tune on")
	fl.StringVar(&f.recording, "recording", "", "a recording (switchyard sim --record, or a live router's) whose requests to tune on")
	fl.Int64Var(&f.runID, "run", 0, "the recording's run (default: its last)")
	fl.StringVar(&b.scenario, "scenario", "", "tune on a whole scenario (its fleet and workload)")
	fl.StringVar(&b.fleet, "fleet", "", "scenario file whose fleet, network, SLOs and router.kv to use (a recording's own fleet otherwise)")
	fl.IntVar(&b.workers, "workers", 0, "simulate N aggregated workers (instead of --fleet)")
	fl.StringVar(&b.profile, "profile", "", "run every worker on this engine profile (docs/engine-model.md#profiles)")
	fl.StringVar(&f.config, "config", "", "router configuration whose dynamo.kv are the current settings")
	fl.StringVar(&f.objective, "objective", string(tune.TTFTP90), "what to optimise: ttft_p90, ttft_p50, e2e_p90, goodput (needs SLO bounds), cache_hit_ratio")
	fl.IntVar(&f.budget, "budget", tune.DefaultBudget, fmt.Sprintf("most simulations of the search, the current settings' included (%d..%d)", tune.MinBudget, tune.MaxBudget))
	fl.Uint64Var(&b.seed, "seed", 1, "seed for the workload, ids and network draws (default: the scenario, fleet file or recording's, else 1)")
	fl.StringVar(&b.out, "out", "", "output folder (default reports/tune-<workload name>)")
	fl.IntVar(&b.limit, "limit", 0, "tune on the first N requests of the trace only")
	fl.Float64Var(&b.speedup, "speedup", 1, "divide the trace's timestamps by this")
	fl.IntVar(&b.parallel, "parallel", runtime.GOMAXPROCS(0), "simulations run at once (the result does not depend on it)")
	fl.Var(durationFlag{&b.sloTTFT}, "slo-ttft", "TTFT bound for goodput (unless the file sets one; default 2s for the report)")
	fl.Var(durationFlag{&b.sloITL}, "slo-itl", "ITL bound for goodput (unless the file sets one; default 100ms for the report)")
	addSweepFlags(fl, &f.sweep)
	fl.StringVar(&f.fromMerged, "from-merged", "", "continue the search from a merged tune sweep (reports merge --out DIR): its cells are not simulated again")
	return cmd
}

// tuneInput is what the search runs on.
type tuneInput struct {
	sc         *sim.Scenario
	source     func() workload.Source // nil: the scenario's workload
	requests   int
	name       string // the workload, for people
	seedSource string
	warning    string // said on stderr before the search
}

// tunePrepare reads and checks what a search or a sweep cell runs on.
func tunePrepare(f tuneFlags) (*tuneInput, tune.Objective, error) {
	objective, err := tune.ParseObjective(f.objective)
	if err != nil {
		return nil, "", &exitError{1, fmt.Errorf("--objective: %w", err)}
	}
	if err := tuneCheckFlags(f); err != nil {
		return nil, "", &exitError{1, err}
	}
	in, err := tuneLoad(f)
	if err != nil {
		return nil, "", &exitError{1, err}
	}
	if objective.NeedsSLO() && in.sc.SLO.TTFT == 0 && in.sc.SLO.ITL == 0 {
		return nil, "", &exitError{1, fmt.Errorf("--objective goodput needs SLO bounds: give --slo-ttft and/or --slo-itl, or set slo: in the fleet or scenario file")}
	}
	if in.sc.SLO.TTFT == 0 && in.sc.SLO.ITL == 0 {
		in.sc.SLO.TTFT, in.sc.SLO.ITL = sim.Duration(2e9), sim.Duration(1e8) // bench pickers' report bounds
	}
	if f.config != "" {
		kv, err := tuneConfigKV(f.config)
		if err != nil {
			return nil, "", &exitError{1, err}
		}
		in.sc.Router.KV = kv
	}
	in.sc.Picker = picker.NameKV
	check := in.sc.Validate
	if in.source != nil { // recorded requests: the scenario needs no workload of its own
		check = func() error { _, err := sim.Normalize(in.sc); return err }
	}
	if err := check(); err != nil {
		return nil, "", &exitError{1, err}
	}
	return in, objective, nil
}

// tuneRun runs the search; with a merged sweep's grid, its cells' points are read, not
// simulated.
func tuneRun(stdout, stderr io.Writer, f tuneFlags, merged *mergedGrid) error {
	in, objective, err := tunePrepare(f)
	if err != nil {
		return err
	}
	current := tune.SettingsOf(in.sc.Router.KV)
	fmt.Fprint(stderr, in.warning)
	runs := f.budget + 1
	if merged != nil {
		if err := merged.check(in); err != nil {
			return err
		}
		runs += 2 - merged.known.Len() // the report's charts simulate the current and tuned points
	}

	bar := progress.New(stderr, int64(in.requests*runs), fmt.Sprintf("tuning on %d simulations", runs))
	w := tune.Workload{Scenario: in.sc, Source: in.source, Progress: func(n int) { bar.Add(int64(n)) }}
	eval := w.Evaluate()
	if merged != nil {
		eval = merged.known.Evaluate(eval)
	}
	var rr stats.Summary
	var rrErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // round robin beside the search: its figures are the report's floor
		defer wg.Done()
		rr, rrErr = w.Run(picker.NameRoundRobin, in.sc.Router.KV)
	}()
	res, err := tune.Search(tune.Options{Objective: objective, Budget: f.budget, Current: current, Parallel: f.bench.parallel}, eval)
	wg.Wait()
	if err != nil {
		bar.Finish()
		return err
	}
	if rrErr != nil {
		bar.Finish()
		return fmt.Errorf("round_robin: %w", rrErr)
	}
	cur, best := res.Evaluations[res.Current], res.Evaluations[res.Best]
	warn := func(s string) { fmt.Fprint(stderr, s) }
	if cur.Summary, err = merged.forReport(cur, w.Evaluate(), warn); err != nil {
		bar.Finish()
		return err
	}
	if res.Best == res.Current {
		best = cur
	} else if best.Summary, err = merged.forReport(best, w.Evaluate(), warn); err != nil {
		bar.Finish()
		return err
	}
	bar.Finish()

	out := f.bench.out
	if out == "" {
		out = filepath.Join("reports", "tune-"+strings.TrimSuffix(in.name, filepath.Ext(in.name)))
	}
	tunedKV := best.Settings.Apply(in.sc.Router.KV)
	withPicker := func(name string, kv sim.KVParams) *reports.RunRouter {
		sc := *in.sc
		sc.Picker, sc.Router.KV = name, kv
		return runRouterOf(&sc)
	}
	setup := setupOf(in.sc)
	cmp := reports.Comparison{Title: "Tuning the KV-aware picker: " + string(objective), Trace: in.name, Fleet: setup.Describe(), Setup: setup,
		Seed: in.sc.Seed, SeedSource: in.seedSource, Generated: "switchyard " + version,
		SLO: stats.SLO{TTFT: in.sc.SLO.TTFT.Std(), ITL: in.sc.SLO.ITL.Std()},
		Pickers: []reports.Run{
			{Name: picker.NameRoundRobin, Summary: rr, Router: withPicker(picker.NameRoundRobin, in.sc.Router.KV)},
			{Name: "kv", Summary: cur.Summary, Router: withPicker(picker.NameKV, in.sc.Router.KV)},
			{Name: "kv_tuned", Summary: best.Summary, Router: withPicker(picker.NameKV, tunedKV)},
		},
		Tuning: tuningOf(res, f.budget)}
	if err := reports.Write(out, cmp); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "tuned.yaml"), tunedYAML(res, in), 0o644); err != nil {
		return err
	}
	js, err := searchJSON(res, f.budget, in, merged)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "search.json"), js, 0o644); err != nil {
		return err
	}

	fmt.Fprintf(stdout, "%d settings simulated (budget %d, %s)\n", len(res.Evaluations), f.budget, convergedWord(res.Converged))
	if merged != nil {
		fmt.Fprintf(stdout, "from sweep %s: %d read from its cells, %d simulated here (and %d again for the report's charts)\n", merged.sweep.ID,
			merged.reused(res), len(res.Evaluations)-merged.reused(res), merged.reportRuns(res))
	}
	fmt.Fprintf(stdout, "%-12s %9s %9s %9s %9s %9s %9s\n", "picker", "TTFT p50", "TTFT p90", "TTFT p99", "E2E p90", "hit", "goodput")
	for _, r := range cmp.Pickers {
		s := r.Summary
		fmt.Fprintf(stdout, "%-12s %9.1f %9.1f %9.1f %9.1f %9.3f %9.3f\n", r.Name, s.TTFT.P50, s.TTFT.P90, s.TTFT.P99, s.E2E.P90, s.HitRatio, s.GoodputRatio)
	}
	fmt.Fprintf(stdout, "%s: %s current, %s tuned (%+.1f %%)\n", objective.Label(), strconv.FormatFloat(cur.Value, 'f', 3, 64),
		strconv.FormatFloat(best.Value, 'f', 3, 64), signedGain(res)*100)
	fmt.Fprintf(stdout, "tuned: %s\n", pointOf(best).Describe())
	fmt.Fprintf(stdout, "seed: %d (%s)\n", in.sc.Seed, in.seedSource)
	fmt.Fprintf(stdout, "dynamo.kv block: %s\nreport: %s\n", filepath.Join(out, "tuned.yaml"), filepath.Join(out, "index.html"))
	return nil
}

// tuneCheckFlags refuses contradictory inputs before anything is read.
func tuneCheckFlags(f tuneFlags) error {
	b := f.bench
	given := 0
	for _, s := range []string{b.trace, f.recording, b.scenario} {
		if s != "" {
			given++
		}
	}
	switch {
	case given != 1:
		return errors.New("give exactly one of --trace FILE, --recording FILE and --scenario FILE")
	case b.fleet != "" && b.workers != 0:
		return errors.New("give at most one of --fleet FILE and --workers N")
	case b.trace != "" && b.fleet == "" && b.workers == 0:
		return errors.New("--trace needs the fleet to run it on: --fleet FILE or --workers N")
	case b.scenario != "" && (b.fleet != "" || b.workers != 0):
		return errors.New("--scenario takes its fleet from the file: drop --fleet and --workers")
	case b.trace == "" && (b.limit != 0 || b.speedup != 1):
		return errors.New("--limit and --speedup apply to --trace only")
	case f.runID != 0 && f.recording == "":
		return errors.New("--run applies to --recording only")
	case f.budget < tune.MinBudget || f.budget > tune.MaxBudget:
		return fmt.Errorf("--budget must be in %d..%d, got %d", tune.MinBudget, tune.MaxBudget, f.budget)
	case b.parallel < 1:
		return fmt.Errorf("--parallel must be at least 1, got %d", b.parallel)
	case b.workers < 0 || b.workers > sim.MaxWorkers:
		return fmt.Errorf("--workers must be in 1..%d", sim.MaxWorkers)
	case b.limit < 0:
		return fmt.Errorf("--limit must be >= 0, got %d", b.limit)
	case !(b.speedup > 0) || math.IsInf(b.speedup, 0):
		return fmt.Errorf("--speedup must be a positive number, got %g", b.speedup)
	}
	return nil
}

// tuneLoad builds the scenario the search runs and its workload. SLO
// bounds left zero here come from neither the flags nor the file.
func tuneLoad(f tuneFlags) (*tuneInput, error) {
	b := f.bench
	if !f.sloSet {
		b.sloTTFT, b.sloITL = 0, 0
	}
	if f.recording == "" {
		sc, seedSource, err := benchScenario(b)
		if err != nil {
			return nil, err
		}
		name := b.trace
		if b.scenario != "" {
			name = b.scenario
		}
		return &tuneInput{sc: sc, requests: sc.ExpectedRequests(), name: filepath.Base(name), seedSource: seedSource}, nil
	}
	rd, err := recorder.Open(f.recording)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	if _, err := replay.Check(rd, f.runID); err != nil {
		return nil, fmt.Errorf("--recording %s: %w", f.recording, err)
	}
	rs, err := replay.PrepareResimulation(rd, f.runID)
	if err != nil {
		return nil, fmt.Errorf("--recording %s: %w", f.recording, err)
	}
	sc, seedSource := rs.Scenario, "recording"
	if b.fleet != "" || b.workers != 0 {
		// Another fleet for the recorded requests: benchScenario's fleet
		// without its trace.
		if sc, seedSource, err = tuneFleet(b); err != nil {
			return nil, err
		}
	} else {
		sc.Faults = nil // the traffic is what is tuned for, not the recorded run's incidents
		if b.seedSet {
			sc.Seed, seedSource = b.seed, "--seed"
		}
		if sc.SLO.TTFT == 0 && sc.SLO.ITL == 0 {
			sc.SLO.TTFT, sc.SLO.ITL = b.sloTTFT, b.sloITL
		}
	}
	in := &tuneInput{sc: sc, source: rs.Source, requests: len(rs.Requests), name: filepath.Base(f.recording), seedSource: seedSource}
	lengthsOnly := 0
	for _, r := range rs.Requests {
		if r.Tokens == nil {
			lengthsOnly++
		}
	}
	if lengthsOnly > 0 {
		in.warning = fmt.Sprintf("warning: %d of %d recorded requests have no token ids (recorded with --no-tokens?): their prompts are synthesized and share no prefix, so the search cannot see their cache hits\n",
			lengthsOnly, len(rs.Requests))
	}
	return in, nil
}

// tuneFleet is the fleet file's scenario, or N aggregated workers, for a
// workload that comes from elsewhere.
func tuneFleet(b benchPickersFlags) (*sim.Scenario, string, error) {
	var sc *sim.Scenario
	seedSource := "--seed"
	if b.fleet != "" {
		var err error
		if sc, err = sim.LoadFleetWith(b.fleet, sim.LoadOptions{Profile: b.profile}); err != nil {
			return nil, "", err
		}
		if !b.seedSet {
			seedSource = "fleet file"
		}
	} else {
		sc = &sim.Scenario{Fleet: []sim.WorkerGroup{{Role: "aggregated", Count: b.workers}}}
		if b.profile != "" {
			if err := sim.WithProfile(sc, b.profile); err != nil {
				return nil, "", err
			}
		}
		if !b.seedSet {
			seedSource = "default"
		}
	}
	if b.seedSet || b.fleet == "" {
		sc.Seed = b.seed
	}
	if sc.SLO.TTFT == 0 && sc.SLO.ITL == 0 {
		sc.SLO.TTFT, sc.SLO.ITL = b.sloTTFT, b.sloITL
	}
	sc.Faults, sc.Workload = nil, sim.Workload{}
	if _, err := sim.Normalize(sc); err != nil {
		return nil, "", err
	}
	return sc, seedSource, nil
}

// tuneConfigKV reads a router configuration's dynamo.kv as the simulator
// takes it; a configuration with errors is refused, each at its field.
func tuneConfigKV(path string) (sim.KVParams, error) {
	c, err := config.Load(path)
	if err != nil {
		return sim.KVParams{}, fmt.Errorf("--config: %w", err)
	}
	if errs, _ := c.Validate(); len(errs) > 0 {
		lines := make([]string, len(errs))
		for i, e := range errs {
			lines[i] = e.String()
		}
		return sim.KVParams{}, fmt.Errorf("--config %s:\n  %s", path, strings.Join(lines, "\n  "))
	}
	return sim.KVParamsOf(coreconfig.KVOptions(c.Dynamo.KV)), nil
}

func convergedWord(ok bool) string {
	if ok {
		return "converged"
	}
	return "budget spent"
}

// signedGain is the objective's change from current to tuned, as a
// fraction of the current figure: negative when a latency fell.
func signedGain(r *tune.Result) float64 {
	if r.Objective.LowerIsBetter() {
		return -r.Gain()
	}
	return r.Gain()
}

func pointOf(e tune.Evaluation) reports.TunePoint {
	s := e.Settings
	return reports.TunePoint{PrefillLoadScale: s.PrefillLoadScale, OverlapScoreCredit: s.OverlapScoreCredit,
		RouterTemperature: s.RouterTemperature, DecodeActiveRequestWeight: s.DecodeActiveRequestWeight,
		TrackActiveBlocks: s.TrackActiveBlocks, TrackPrefillTokens: s.TrackPrefillTokens, Phase: e.Phase, Value: e.Value}
}

func tuningOf(r *tune.Result, budget int) *reports.Tuning {
	t := &reports.Tuning{Objective: string(r.Objective), Label: r.Objective.Label(), LowerIsBetter: r.Objective.LowerIsBetter(),
		Budget: budget, Converged: r.Converged, Current: r.Current, Tuned: r.Best, CurrentRun: "kv", TunedRun: "kv_tuned"}
	for _, e := range r.Evaluations {
		t.Points = append(t.Points, pointOf(e))
	}
	return t
}

// fmtKnob writes a knob's value as YAML and search.json take it.
func fmtKnob(v float64) string { return strconv.FormatFloat(round6(v), 'g', -1, 64) }

func round6(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return math.Round(v*1e6) / 1e6
}

// tunedYAML is the recommended dynamo.kv block, to merge into a router
// configuration; the comments say where it comes from.
func tunedYAML(r *tune.Result, in *tuneInput) []byte {
	cur, best := r.Evaluations[r.Current], r.Evaluations[r.Best]
	s := best.Settings
	var b bytes.Buffer
	fmt.Fprintf(&b, "# switchyard tune, objective %s, on %s (seed %d): %d settings simulated.\n", r.Objective, in.name, in.sc.Seed, len(r.Evaluations))
	fmt.Fprintf(&b, "# %s: %s with the current settings, %s with these (%+.1f %%).\n", r.Objective.Label(),
		fmtKnob(cur.Value), fmtKnob(best.Value), signedGain(r)*100)
	if r.Best == r.Current {
		b.WriteString("# Nothing beat the current settings: they are repeated here.\n")
	}
	kvBlockYAML(&b, s)
	return b.Bytes()
}

// kvBlockYAML writes the dynamo.kv block of the searched knobs.
func kvBlockYAML(b *bytes.Buffer, s tune.Settings) {
	b.WriteString("# Merge into the router configuration's dynamo.kv; its other settings stay as they are.\n")
	b.WriteString("dynamo:\n  kv:\n")
	fmt.Fprintf(b, "    prefill_load_scale: %s # Dynamo's kv_overlap_score_weight\n", fmtKnob(s.PrefillLoadScale))
	fmt.Fprintf(b, "    overlap_score_credit: %s\n", fmtKnob(s.OverlapScoreCredit))
	fmt.Fprintf(b, "    router_temperature: %s\n", fmtKnob(s.RouterTemperature))
	fmt.Fprintf(b, "    decode_active_request_weight: %s\n", fmtKnob(s.DecodeActiveRequestWeight))
	fmt.Fprintf(b, "    track_active_blocks: %t\n", s.TrackActiveBlocks)
	fmt.Fprintf(b, "    track_prefill_tokens: %t\n", s.TrackPrefillTokens)
}

type searchFile struct {
	Objective     string  `json:"objective"`
	LowerIsBetter bool    `json:"lower_is_better"`
	Unit          string  `json:"unit"`
	Workload      string  `json:"workload"`
	Seed          uint64  `json:"seed"`
	SeedSource    string  `json:"seed_source"`
	Budget        int     `json:"budget"`
	Converged     bool    `json:"converged"`
	Current       int     `json:"current"`
	Best          int     `json:"best"`
	Gain          float64 `json:"gain"`
	// FromSweep and Reused say, for a search continued from a merged sweep, which sweep and
	// how many evaluations were read from its cells.
	FromSweep   string            `json:"from_sweep,omitempty"`
	Reused      int               `json:"reused,omitempty"`
	Evaluations []searchEvalJSONs `json:"evaluations"`
}

type searchEvalJSONs struct {
	Index        int            `json:"index"`
	Phase        string         `json:"phase"`
	Round        int            `json:"round"`
	Settings     tune.Settings  `json:"settings"`
	Value        float64        `json:"value"`
	Requests     int            `json:"requests"`
	Completed    int            `json:"completed"`
	Failed       int            `json:"failed"`
	TTFTP50Ms    float64        `json:"ttft_p50_ms"`
	TTFTP90Ms    float64        `json:"ttft_p90_ms"`
	TTFTP99Ms    float64        `json:"ttft_p99_ms"`
	E2EP90Ms     float64        `json:"e2e_p90_ms"`
	GoodputRatio float64        `json:"goodput_ratio"`
	HitRatio     float64        `json:"hit_ratio"`
	Reasons      map[string]int `json:"reasons"`
}

// searchJSON is search.json: every evaluated setting in evaluation order.
func searchJSON(r *tune.Result, budget int, in *tuneInput, merged *mergedGrid) ([]byte, error) {
	f := searchFile{Objective: string(r.Objective), LowerIsBetter: r.Objective.LowerIsBetter(), Unit: r.Objective.Unit(),
		Workload: in.name, Seed: in.sc.Seed, SeedSource: in.seedSource, Budget: budget, Converged: r.Converged,
		Current: r.Current, Best: r.Best, Gain: round6(r.Gain()), Evaluations: []searchEvalJSONs{}}
	if merged != nil {
		f.FromSweep, f.Reused = merged.sweep.ID, merged.reused(r)
	}
	for i, e := range r.Evaluations {
		s, k := e.Summary, e.Settings
		k.PrefillLoadScale, k.OverlapScoreCredit = round6(k.PrefillLoadScale), round6(k.OverlapScoreCredit)
		reasons := s.Reasons
		if reasons == nil {
			reasons = map[string]int{}
		}
		f.Evaluations = append(f.Evaluations, searchEvalJSONs{Index: i, Phase: e.Phase, Round: e.Round, Settings: k, Value: round6(e.Value),
			Requests: s.Requests, Completed: s.Completed, Failed: s.Failed, TTFTP50Ms: round6(s.TTFT.P50), TTFTP90Ms: round6(s.TTFT.P90),
			TTFTP99Ms: round6(s.TTFT.P99), E2EP90Ms: round6(s.E2E.P90), GoodputRatio: round6(s.GoodputRatio), HitRatio: round6(s.HitRatio),
			Reasons: reasons})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
