package main

import (
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"switchyard/internal/progress"
	"switchyard/reports"
	"switchyard/sim"
	"switchyard/sim/stats"
)

type benchReplicasFlags struct {
	scenario, profile, picker, out string
	replicas                       string
	syncDelay                      sim.Duration
	syncLoss                       float64
	degraded                       []string
	parallel                       int
}

func newBenchReplicasCmd() *cobra.Command {
	var f benchReplicasFlags
	cmd := &cobra.Command{
		Use:   "replicas --scenario FILE [--picker kv_tracked] [--replicas 1,2,4]",
		Short: "Compare one router replica with several, with and without replica sync, and write a report folder",
		Long: "Run the scenario in FILE (fleet and workload) once per router configuration: one\n" +
			"replica; then, for each larger count in --replicas, that many replicas without\n" +
			"replica sync and with it (router.replicas, router.replica_sync, docs/simulation.md);\n" +
			"for each --degraded-sync DELAY/LOSS, the largest count once more over a link that\n" +
			"slow and lossy. Same seed, same arrivals, same prompts. Writes\n" +
			"index.html, summary.md and summary.json (docs/reports.md) to --out.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchReplicas(cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.scenario, "scenario", "", "scenario file (its fleet and workload)")
	fl.StringVar(&f.profile, "profile", "", "run every worker on this engine profile instead of the scenario's engines")
	fl.StringVar(&f.picker, "picker", "", "picker every replica runs (default: the scenario's)")
	fl.StringVar(&f.replicas, "replicas", "1,2,4", "comma-separated replica counts")
	f.syncDelay = sim.Duration(sim.DefaultSyncDelay)
	fl.Var(durationFlag{&f.syncDelay}, "sync-delay", "replica-sync batches reach the peers this long after they leave")
	fl.Float64Var(&f.syncLoss, "sync-loss", 0, "probability a replica-sync batch is lost on its way to one peer")
	fl.StringArrayVar(&f.degraded, "degraded-sync", nil, "DELAY/LOSS (e.g. 20ms/0.1): add a run of the largest count with replica sync over such a link; repeatable")
	fl.StringVar(&f.out, "out", "", "report folder (default reports/replicas-<scenario name>)")
	fl.IntVar(&f.parallel, "parallel", runtime.GOMAXPROCS(0), "runs simulated at once")
	_ = cmd.MarkFlagRequired("scenario")
	return cmd
}

// replicaVariant is one router configuration of the comparison.
type replicaVariant struct {
	name     string
	replicas int
	sync     bool
	delay    sim.Duration
	loss     float64
	scenario *sim.Scenario
}

func replicaVariants(f benchReplicasFlags) ([]replicaVariant, error) {
	var counts []int
	for _, s := range strings.Split(f.replicas, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > sim.MaxReplicas {
			return nil, fmt.Errorf("--replicas: %q is not a count in 1..%d", s, sim.MaxReplicas)
		}
		counts = append(counts, n)
	}
	var vs []replicaVariant
	largest := 0
	for _, n := range counts {
		largest = max(largest, n)
		if n == 1 {
			vs = append(vs, replicaVariant{name: "1 replica", replicas: 1})
			continue
		}
		vs = append(vs, replicaVariant{name: fmt.Sprintf("%d replicas", n), replicas: n},
			replicaVariant{name: fmt.Sprintf("%d replicas, sync", n), replicas: n, sync: true, delay: f.syncDelay, loss: f.syncLoss})
	}
	for _, spec := range f.degraded {
		if largest < 2 {
			return nil, fmt.Errorf("--degraded-sync needs a count of 2 or more in --replicas")
		}
		ds, ls, ok := strings.Cut(spec, "/")
		var d sim.Duration
		loss, err := strconv.ParseFloat(ls, 64)
		if !ok || d.Set(ds) != nil || err != nil || d <= 0 || !(loss >= 0 && loss < 1) {
			return nil, fmt.Errorf("--degraded-sync %q: want DELAY/LOSS, a duration > 0 and a probability in [0, 1), e.g. 20ms/0.1", spec)
		}
		vs = append(vs, replicaVariant{name: fmt.Sprintf("%d replicas, sync over %v, %g%% lost", largest, d.Std(), 100*loss),
			replicas: largest, sync: true, delay: d, loss: loss})
	}
	return vs, nil
}

func benchReplicas(stdout, stderr io.Writer, f benchReplicasFlags) error {
	base, err := sim.LoadScenarioWith(f.scenario, sim.LoadOptions{Profile: f.profile})
	if err != nil {
		return &exitError{1, err}
	}
	if f.picker != "" {
		base.Picker = f.picker
	}
	variants, err := replicaVariants(f)
	if err != nil {
		return &exitError{1, err}
	}
	for i := range variants {
		v := &variants[i]
		sc := *base
		sc.Router.Replicas, sc.Router.ReplicaSync, sc.Router.SyncDelay, sc.Router.SyncLoss = v.replicas, v.sync, v.delay, v.loss
		if v.replicas == 1 {
			sc.Router.Replicas = 0 // the run as it is without the setting
		}
		if err := sc.Validate(); err != nil {
			return &exitError{1, fmt.Errorf("%s: %w", v.name, err)}
		}
		v.scenario = &sc
	}
	bar := progress.New(stderr, int64(base.ExpectedRequests()*len(variants)), fmt.Sprintf("simulating %d router configurations", len(variants)))
	results := make([]*simResult, len(variants))
	errs := make([]error, len(variants))
	sem := make(chan struct{}, max(f.parallel, 1))
	var wg sync.WaitGroup
	for i := range variants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = simulate(variants[i].scenario, simulateOptions{bar: bar})
		}()
	}
	wg.Wait()
	bar.Finish()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("%s: %w", variants[i].name, err)
		}
	}
	out := f.out
	if out == "" {
		out = filepath.Join("reports", "replicas-"+strings.TrimSuffix(filepath.Base(f.scenario), filepath.Ext(f.scenario)))
	}
	setup := setupOf(base)
	cmp := reports.Comparison{Title: "Router replicas, picker " + base.Picker, Trace: filepath.Base(f.scenario), Fleet: setup.Describe(),
		Setup: setup, Seed: base.Seed, SeedSource: "scenario file", Generated: "switchyard " + version,
		SLO: stats.SLO{TTFT: base.SLO.TTFT.Std(), ITL: base.SLO.ITL.Std()}, Column: "router"}
	for i, r := range results {
		cmp.Pickers = append(cmp.Pickers, reports.Run{Name: variants[i].name, Summary: r.Stats, Router: runRouterOf(variants[i].scenario)})
	}
	if err := reports.Write(out, cmp); err != nil {
		return err
	}
	width := 12
	for _, v := range variants {
		width = max(width, len(v.name))
	}
	fmt.Fprintf(stdout, "%-*s %9s %9s %9s %9s %9s %10s %10s\n", width, "router", "TTFT p50", "TTFT p90", "TTFT p99", "hit", "goodput", "imbalance", "peer evts")
	for i, r := range results {
		s := r.Stats
		var peer uint64
		for _, rs := range r.Replicas {
			if rs.Peers != nil {
				peer += rs.Peers.Events
			}
		}
		fmt.Fprintf(stdout, "%-*s %9.1f %9.1f %9.1f %9.3f %8.1f%% %10.2f %10d\n", width, variants[i].name, s.TTFT.P50, s.TTFT.P90, s.TTFT.P99,
			s.HitRatio, 100*s.GoodputRatio, s.Imbalance, peer)
	}
	fmt.Fprintf(stdout, "seed: %d (scenario file)\n", base.Seed)
	fmt.Fprintf(stdout, "report: %s\n", filepath.Join(out, "index.html"))
	return nil
}
