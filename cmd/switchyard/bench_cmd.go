package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"switchyard/internal/progress"
	"switchyard/internal/traces"
	"switchyard/reports"
	"switchyard/router/picker"
	"switchyard/sim"
	"switchyard/sim/stats"
	"switchyard/sweep"
)

func init() { register(newBenchCmd) }

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Offline benchmarks of the routing core",
	}
	cmd.AddCommand(newBenchPickersCmd(), newBenchReplicasCmd())
	return cmd
}

type benchPickersFlags struct {
	trace, fleet, scenario   string
	profile                  string
	out, pickers             string
	workers, limit, parallel int
	seed                     uint64
	seedSet                  bool // --seed was given: it overrides the scenario or fleet file's seed
	speedup                  float64
	sloTTFT, sloITL          sim.Duration
	sweep                    sweepFlags
	cell                     *reports.Cell // the sweep cell this run is, if any
}

// benchSweepable are the flags a bench pickers sweep may vary.
var benchSweepable = sweepableFlags("seed", "workers", "trace", "fleet", "scenario", "profile", "limit", "speedup", "slo-ttft", "slo-itl")

func newBenchPickersCmd() *cobra.Command {
	var f benchPickersFlags
	cmd := &cobra.Command{
		Use:   "pickers (--trace FILE (--fleet FILE | --workers N) | --scenario FILE) --pickers round_robin,random,load,kv",
		Short: "Compare pickers on a trace in the simulator and write a report folder",
		Long: "Replay a Mooncake JSONL trace against a simulated fleet once per picker (same seed,\n" +
			"same arrivals, same prompts) and write index.html (charts), summary.md and\n" +
			"summary.json (docs/reports.md) to --out. --workers N simulates N aggregated\n" +
			"workers with the default engine model; --fleet FILE takes the fleet, network and\n" +
			"SLOs of a scenario file (its workload, if any, is replaced by the trace).\n" +
			"--scenario FILE runs a whole scenario (fleet and workload) once per picker\n" +
			"instead. A scenario or fleet file's seed is used unless --seed is given.\n" +
			"--sweep NAME=V1,V2,... (repeatable) makes a grid of such runs: --cell N runs\n" +
			"cell N here, --emit-job DIR writes a Kubernetes Indexed Job that runs every\n" +
			"cell, and `switchyard reports merge` joins their reports (docs/sweeps.md).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.sweep.active(cmd.Flags()) {
				plan, err := newSweepPlan(cmd, "bench pickers", &f.sweep, benchSweepable, newBenchPickersCmd)
				if err != nil {
					return &exitError{1, err}
				}
				if f.sweep.emitJob != "" {
					return plan.emitJob(cmd.OutOrStdout(), cmd.Flags(), &f.sweep)
				}
				if f.cell, err = plan.apply(cmd, f.sweep.cell, ""); err != nil {
					return &exitError{1, err}
				}
			}
			f.seedSet = cmd.Flags().Changed("seed")
			return benchPickers(cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.trace, "trace", "", "Mooncake JSONL trace")
	fl.StringVar(&f.fleet, "fleet", "", "scenario file whose fleet, network and SLOs to use")
	fl.StringVar(&f.scenario, "scenario", "", "compare on a whole scenario (its fleet and workload) instead of a trace")
	fl.IntVar(&f.workers, "workers", 0, "simulate N aggregated workers (instead of --fleet)")
	fl.StringVar(&f.profile, "profile", "", "run every worker on this engine profile (a perf profile JSON file, docs/engine-model.md#profiles) instead of the mocker")
	fl.StringVar(&f.pickers, "pickers", "round_robin,random,load,kv", "comma-separated pickers to compare")
	fl.Uint64Var(&f.seed, "seed", 1, "seed for the workload, ids, network draws and the random picker (default: the scenario or fleet file's, else 1)")
	fl.StringVar(&f.out, "out", "", "report folder (default reports/pickers-<trace name>)")
	fl.IntVar(&f.limit, "limit", 0, "replay only the first N requests of the trace")
	fl.Float64Var(&f.speedup, "speedup", 1, "divide the trace's timestamps by this")
	fl.IntVar(&f.parallel, "parallel", runtime.GOMAXPROCS(0), "pickers simulated at once")
	f.sloTTFT, f.sloITL = sim.Duration(2e9), sim.Duration(1e8)
	fl.Var(durationFlag{&f.sloTTFT}, "slo-ttft", "TTFT bound for goodput (unless the fleet file sets one)")
	fl.Var(durationFlag{&f.sloITL}, "slo-itl", "ITL bound for goodput (unless the fleet file sets one)")
	addSweepFlags(fl, &f.sweep)
	return cmd
}

// durationFlag lets a sim.Duration be a flag.
type durationFlag struct{ d *sim.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.Std().String()
}
func (f durationFlag) Type() string { return "duration" }
func (f durationFlag) Set(s string) error {
	var d sim.Duration
	if err := d.Set(s); err != nil {
		return err
	}
	*f.d = d
	return nil
}

func benchPickers(stdout, stderr io.Writer, f benchPickersFlags) error {
	switch {
	case f.scenario != "" && (f.trace != "" || f.fleet != "" || f.workers != 0):
		return &exitError{1, fmt.Errorf("--scenario takes its fleet and workload from the file: drop --trace, --fleet and --workers")}
	case f.scenario == "" && f.trace == "":
		return &exitError{1, fmt.Errorf("give --trace FILE (with --fleet FILE or --workers N) or --scenario FILE")}
	case f.scenario == "" && (f.fleet == "") == (f.workers == 0):
		return &exitError{1, fmt.Errorf("give exactly one of --fleet FILE and --workers N")}
	}
	names := strings.Split(f.pickers, ",")
	base, seedSource, err := benchScenario(f)
	if err != nil {
		return &exitError{1, err}
	}
	scs := make([]*sim.Scenario, len(names))
	for i, name := range names {
		sc := *base
		sc.Picker = strings.TrimSpace(name)
		if err := sc.Validate(); err != nil {
			return &exitError{1, err}
		}
		scs[i] = &sc
	}
	perRun := base.ExpectedRequests()
	bar := progress.New(stderr, int64(perRun*len(names)), fmt.Sprintf("simulating %d pickers", len(names)))
	results := make([]*simResult, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, max(f.parallel, 1))
	var wg sync.WaitGroup
	for i := range scs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = simulate(scs[i], simulateOptions{bar: bar})
		}()
	}
	wg.Wait()
	bar.Finish()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("picker %s: %w", names[i], err)
		}
	}
	source := f.trace
	if f.scenario != "" {
		source = f.scenario
	}
	out := f.out
	if out == "" {
		out = filepath.Join("reports", "pickers-"+strings.TrimSuffix(filepath.Base(source), filepath.Ext(source)))
	}
	setup := setupOf(base)
	cmp := reports.Comparison{Title: "Picker comparison", Trace: filepath.Base(source), Fleet: setup.Describe(), Setup: setup,
		Seed: base.Seed, SeedSource: seedSource, Generated: "switchyard " + version,
		SLO: stats.SLO{TTFT: base.SLO.TTFT.Std(), ITL: base.SLO.ITL.Std()}, Cell: f.cell}
	for i, r := range results {
		cmp.Pickers = append(cmp.Pickers, reports.Run{Name: names[i], Summary: r.Stats, Router: runRouterOf(scs[i])})
	}
	if err := reports.Write(out, cmp); err != nil {
		return err
	}
	width := 12 // the name column fits the longest picker name
	for _, n := range names {
		width = max(width, len(n))
	}
	fmt.Fprintf(stdout, "%-*s %9s %9s %9s %9s %9s %9s %10s\n", width, "picker", "TTFT p50", "TTFT p99", "ITL p50", "E2E p99", "hit", "bound", "imbalance")
	for i, r := range results {
		s := r.Stats
		fmt.Fprintf(stdout, "%-*s %9.1f %9.1f %9.2f %9.1f %9.3f %9.3f %10.2f\n", width, names[i], s.TTFT.P50, s.TTFT.P99, s.ITL.P50, s.E2E.P99,
			s.HitRatio, s.HitRatioBound, s.Imbalance)
	}
	fmt.Fprintf(stdout, "seed: %d (%s)\n", base.Seed, seedSource)
	if f.cell != nil {
		fmt.Fprintf(stdout, "cell %d of %d of sweep %s: %s\n", f.cell.Index, f.cell.Cells, f.cell.Sweep, sweep.Key(f.cell.Coordinates))
	}
	fmt.Fprintf(stdout, "report: %s\n", filepath.Join(out, "index.html"))
	return nil
}

// benchScenario is the scenario every picker runs: the whole scenario file,
// or the fleet file's fleet (or N aggregated workers) with the trace as its
// workload. It also says where the seed came from: a file's own seed is
// kept unless --seed was given.
func benchScenario(f benchPickersFlags) (*sim.Scenario, string, error) {
	var sc *sim.Scenario
	var err error
	seedSource := "--seed"
	switch {
	case f.scenario != "":
		if sc, err = sim.LoadScenarioWith(f.scenario, sim.LoadOptions{Profile: f.profile}); err != nil {
			return nil, "", err
		}
		if !f.seedSet {
			seedSource = "scenario file"
		}
	case f.fleet != "":
		if sc, err = sim.LoadFleetWith(f.fleet, sim.LoadOptions{Profile: f.profile}); err != nil {
			return nil, "", err
		}
		if !f.seedSet {
			seedSource = "fleet file"
		}
	default:
		if f.workers < 1 || f.workers > sim.MaxWorkers {
			return nil, "", fmt.Errorf("--workers must be in 1..%d", sim.MaxWorkers)
		}
		sc = &sim.Scenario{Fleet: []sim.WorkerGroup{{Role: "aggregated", Count: f.workers}}}
		if f.profile != "" {
			if err := sim.WithProfile(sc, f.profile); err != nil {
				return nil, "", err
			}
		}
		if !f.seedSet {
			seedSource = "default"
		}
	}
	if f.seedSet || f.scenario == "" && f.fleet == "" {
		sc.Seed = f.seed
	}
	if sc.SLO.TTFT == 0 {
		sc.SLO.TTFT = f.sloTTFT
	}
	if sc.SLO.ITL == 0 {
		sc.SLO.ITL = f.sloITL
	}
	if f.scenario != "" {
		return sc, seedSource, sc.Validate()
	}
	abs, err := benchTracePath(f.trace)
	if err != nil {
		return nil, "", err
	}
	sc.Faults = nil
	sc.Workload = sim.Workload{Trace: &sim.TraceSpec{Path: abs, Speedup: f.speedup, Limit: f.limit}}
	if _, err := sim.Normalize(sc); err != nil {
		return nil, "", err
	}
	return sc, seedSource, sc.Validate()
}

// setupOf is the report's account of the fleet, network and router
// settings every picker ran with (defaults filled in).
func setupOf(sc *sim.Scenario) *reports.Setup {
	s := &reports.Setup{}
	for _, g := range sc.Fleet {
		s.Workers = append(s.Workers, reports.WorkerGroup{Role: g.Role, Count: g.Count, DPSize: g.DPSize, BlockSize: g.BlockSize,
			TotalKVBlocks: g.TotalKVBlocks, MaxNumBatchedTokens: g.MaxNumBatchedTokens, MaxNumSeqs: g.MaxNumSeqs,
			ContextLength: g.ContextLength, SpeedupRatio: g.SpeedupRatio, KVTransferBandwidth: g.KVTransferBandwidth,
			KVBytesPerBlock: g.KVBytesPerBlock, LoadFields: g.LoadFields, Engine: g.Engine.ProfileName()})
	}
	n := sc.Network
	s.Network = reports.Network{DiscoveryDelay: n.DiscoveryDelay.Std(), SubscribeDelay: n.SubscribeDelay.Std(),
		LoadDelay: n.LoadDelay.Std(), LoadJitter: n.LoadJitter.Std(), LoadLoss: n.LoadLoss,
		PublishDebounce: n.PublishDebounce.Std(), RequestDelay: n.RequestDelay.Std(), LeaseTTL: n.LeaseTTL.Std()}
	ko := sc.Router.KV.Options()
	s.Router = reports.Router{MaxStaleness: sc.Router.MaxStaleness.Std(), KV: reports.KVSettings{
		OverlapScoreCredit: ko.OverlapScoreCredit, PrefillLoadScale: ko.PrefillLoadScale, Temperature: ko.Temperature,
		ConditionalDisaggregation: ko.ConditionalDisagg, DecodeBusyThreshold: ko.DecodeBusyThreshold}}
	return s
}

// runRouterOf is what the routing core of sc's run was configured with:
// its picker and the dynamo.kv block, tracking switches as the picker
// applies them (the *_tracked pickers force prefill tokens and active
// blocks on).
func runRouterOf(sc *sim.Scenario) *reports.RunRouter {
	o := sc.Router.KV.Options()
	t := o.Track
	if sc.Picker == picker.NameLoadTracked || sc.Picker == picker.NameKVTracked {
		t.ActiveBlocks, t.PrefillTokens = true, true
	}
	rr := &reports.RunRouter{Picker: sc.Picker, KVScored: picker.IsKV(sc.Picker), MaxStaleness: sc.Router.MaxStaleness.Std(),
		KV: reports.KVBlock{OverlapScoreCredit: o.OverlapScoreCredit, PrefillLoadScale: o.PrefillLoadScale,
			RouterTemperature: o.Temperature, DecodeActiveRequestWeight: o.DecodeActiveRequestWeight,
			OverlapScoreCreditDecay: o.OverlapScoreCreditDecay, TrackActiveBlocks: t.ActiveBlocks,
			TrackPrefillTokens: t.PrefillTokens, TrackOutputBlocks: t.OutputBlocks, ExpectedOutputTokens: t.ExpectedOutputTokens,
			UseKVEvents: !o.PredictCache, PredictedBlockTTL: o.PredictedTTL,
			ConditionalDisaggregation: o.ConditionalDisagg, DecodeBusyThreshold: o.DecodeBusyThreshold},
		Replicas: sc.Router.ReplicaCount(), ReplicaSync: sc.Router.ReplicaSync, SyncLoss: sc.Router.SyncLoss}
	if sc.Router.ReplicaSync {
		rr.SyncDelay = sc.Router.SyncDelay.Std()
	}
	return rr
}

// benchTracePath is --trace as given when that file exists, otherwise the
// trace of that name in the trace directory ($SWITCHYARD_TRACE_DIR), so
// `--trace mooncake_conversation_trace.jsonl` works from any clone.
func benchTracePath(name string) (string, error) {
	if _, err := os.Stat(name); err == nil || filepath.IsAbs(name) {
		return filepath.Abs(name)
	}
	path, err := traces.Find(name)
	if err != nil {
		return "", fmt.Errorf("--trace %s: not found here; %w", name, err)
	}
	return path, nil
}
