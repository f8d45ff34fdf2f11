package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"switchyard/internal/progress"
	"switchyard/recorder"
	"switchyard/router/core"
	"switchyard/sim"
	"switchyard/sim/stats"
)

func init() { register(newSimCmd) }

func newSimCmd() *cobra.Command {
	var (
		path, record, pickerName string
		profile                  string
		asJSON, noTokens         bool
		logs                     logFlags
	)
	cmd := &cobra.Command{
		Use:   "sim --scenario FILE [--record out.db]",
		Short: "Simulate a scenario: the routing core against a fake fleet in virtual time",
		Long: "Run the scenario in FILE (docs/simulation.md): the production routing core, fed by\n" +
			"engine-model workers through the same discovery records and load frames as live,\n" +
			"in virtual time. The same scenario and seed give the same run, byte for byte.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger()
			if err != nil {
				return err
			}
			sc, err := sim.LoadScenarioWith(path, sim.LoadOptions{Profile: profile})
			if err != nil {
				return &exitError{1, err}
			}
			if pickerName != "" {
				sc.Picker = pickerName
				if err := sc.Validate(); err != nil {
					return &exitError{1, err}
				}
			}
			res, err := simulate(sc, simulateOptions{record: record, noTokens: noTokens, log: log, progress: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			res.print(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "scenario", "", "scenario file (YAML)")
	cmd.Flags().StringVar(&record, "record", "", "record the run to this SQLite file")
	cmd.Flags().StringVar(&pickerName, "picker", "", "override the scenario's picker")
	cmd.Flags().StringVar(&profile, "profile", "", "run every worker on this engine profile (a perf profile JSON file, docs/engine-model.md#profiles) instead of the scenario's engines")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the summary as JSON")
	cmd.Flags().BoolVar(&noTokens, "no-tokens", false, "record prompt lengths without their token ids (much smaller recordings of long prompts)")
	_ = cmd.MarkFlagRequired("scenario")
	logs.add(cmd)
	return cmd
}

type simulateOptions struct {
	record   string
	noTokens bool
	log      *slog.Logger
	progress io.Writer
	// bar, when set, is shared by several runs (bench pickers).
	bar *progress.Bar
}

// simResult is a run's summary as the sim command prints it.
type simResult struct {
	Scenario string        `json:"scenario"`
	Picker   string        `json:"picker"`
	Seed     uint64        `json:"seed"`
	Run      sim.Summary   `json:"run"`
	Stats    stats.Summary `json:"stats"`
	WallMS   float64       `json:"wall_ms"`
	// Speedup is simulated time over wall time.
	Speedup   float64         `json:"speedup"`
	Recording *recorder.Stats `json:"recording,omitempty"`
	// Core counts what the routing core did: load and kv-events messages
	// by result, selections by role/reason, KV-aware selections by result
	// (every router replica's together).
	Core coreCounts `json:"core"`
	// Replicas is what each router replica did, when there are several.
	Replicas []sim.ReplicaSummary `json:"replicas,omitempty"`
}

type coreCounts struct {
	LoadMessages map[string]uint64 `json:"load_messages"`
	KVMessages   map[string]uint64 `json:"kv_messages,omitempty"`
	Selections   map[string]uint64 `json:"selections"`
	KVSelections map[string]uint64 `json:"kv_selections,omitempty"`
	// KVReplay counts gap recovery by replay by result.
	KVReplay map[string]uint64 `json:"kv_replay,omitempty"`
}

func countsOf(cs []*core.Core) coreCounts {
	if len(cs) == 1 {
		c := cs[0]
		out := coreCounts{LoadMessages: map[string]uint64{}, KVMessages: c.KVResults(), Selections: c.Reasons(),
			KVSelections: c.KVSelections(), KVReplay: c.KVReplayCounts()}
		for r, n := range c.LoadResults() {
			out.LoadMessages[r.String()] = n
		}
		return out
	}
	out := coreCounts{LoadMessages: map[string]uint64{}, KVMessages: map[string]uint64{}, Selections: map[string]uint64{},
		KVSelections: map[string]uint64{}, KVReplay: map[string]uint64{}}
	for _, c := range cs {
		for r, n := range c.LoadResults() {
			out.LoadMessages[r.String()] += n
		}
		for _, pair := range []struct{ dst, src map[string]uint64 }{{out.KVMessages, c.KVResults()},
			{out.Selections, c.Reasons()}, {out.KVSelections, c.KVSelections()}, {out.KVReplay, c.KVReplayCounts()}} {
			for k, n := range pair.src {
				pair.dst[k] += n
			}
		}
	}
	return out
}

// simulate runs one scenario, optionally recording it, and summarises it.
func simulate(sc *sim.Scenario, o simulateOptions) (*simResult, error) {
	var port core.Port
	var w *recorder.Writer
	if o.record != "" {
		var err error
		w, err = recorder.Create(o.record, recorder.Run{Kind: "sim", Scenario: sc.YAML(), Seed: sc.Seed, Version: version,
			Picker: sc.Picker, Start: time.Now()}, recorder.Options{Block: true})
		if err != nil {
			return nil, err
		}
		port = w
		if o.noTokens {
			port = core.WithoutTokens(w)
		}
	}
	col := stats.NewCollector(stats.SLO{TTFT: sc.SLO.TTFT.Std(), ITL: sc.SLO.ITL.Std()})
	bar := o.bar
	own := bar == nil && o.progress != nil
	if own {
		bar = progress.New(o.progress, int64(sc.ExpectedRequests()), "simulating "+sc.Picker)
	}
	last := 0
	run, err := sim.New(sc, sim.Options{Record: port, Log: o.log, Observer: sim.Collect(col), Progress: func(n int) {
		if bar != nil {
			bar.Add(int64(n - last))
		}
		last = n
	}})
	if err != nil {
		if w != nil {
			_, _ = w.Close()
		}
		return nil, err
	}
	start := time.Now()
	sum, err := run.Execute()
	wall := time.Since(start)
	if own {
		bar.Finish()
	}
	res := &simResult{Scenario: sc.Name, Picker: sc.Picker, Seed: sc.Seed, Run: sum, Stats: col.Summary(sum.Virtual),
		WallMS: float64(wall) / 1e6, Core: countsOf(run.Cores())}
	if sc.Router.ReplicaCount() > 1 {
		res.Replicas = run.Replicas()
	}
	if wall > 0 {
		res.Speedup = float64(sum.Virtual) / float64(wall)
	}
	if w != nil {
		st, cerr := w.Close()
		res.Recording = &st
		if err == nil {
			err = cerr
		}
	}
	return res, err
}

func (r *simResult) print(out io.Writer) {
	s := r.Stats
	fmt.Fprintf(out, "picker %s, seed %d: %d requests (%d served, %d failed, %d refused) over %v simulated in %.0f ms (%.0f× real time)\n",
		r.Picker, r.Seed, r.Run.Requests, r.Run.Served, r.Run.Failed, r.Run.Refused, r.Run.Virtual.Round(time.Millisecond), r.WallMS, r.Speedup)
	fmt.Fprintf(out, "  TTFT ms  p50 %8.1f  p90 %8.1f  p99 %8.1f\n", s.TTFT.P50, s.TTFT.P90, s.TTFT.P99)
	fmt.Fprintf(out, "  ITL ms   p50 %8.2f  p90 %8.2f  p99 %8.2f\n", s.ITL.P50, s.ITL.P90, s.ITL.P99)
	fmt.Fprintf(out, "  E2E ms   p50 %8.1f  p90 %8.1f  p99 %8.1f\n", s.E2E.P50, s.E2E.P90, s.E2E.P99)
	fmt.Fprintf(out, "  hit ratio %.3f (infinite-cache bound %.3f), imbalance %.2f, goodput %.1f%%, %d load messages\n",
		s.HitRatio, s.HitRatioBound, s.Imbalance, 100*s.GoodputRatio, r.Run.LoadMessages)
	if len(r.Core.KVSelections) > 0 {
		fmt.Fprintf(out, "  kv: %d kv-events messages (%s), selections %s\n", r.Run.KVMessages,
			formatCounts(r.Core.KVMessages), formatCounts(r.Core.KVSelections))
	}
	if len(r.Core.KVReplay) > 0 {
		fmt.Fprintf(out, "  kv replay: %s; publishers served %d replays, %d messages reached the router\n",
			formatCounts(r.Core.KVReplay), r.Run.ReplayRequests, r.Run.ReplayMessages)
	}
	if b := r.Run.Brokers; b != nil {
		fmt.Fprint(out, "  brokers:")
		for i, st := range b.Brokers {
			if i > 0 {
				fmt.Fprint(out, ";")
			}
			state := "live"
			if !st.Live {
				state = "down"
			}
			fmt.Fprintf(out, " %s %s, %d sessions, %d streams opened, %d open", st.ID, state, st.Sessions, st.Opened, st.Carried)
		}
		fmt.Fprintf(out, "\n  streams lost %d, reopened %d (longest outage %v); pending %d times for %v (longest %v), %d still pending\n",
			b.Lost, b.Replaced, b.MaxOutage.Round(time.Millisecond), b.Pending, b.PendingTime.Round(time.Millisecond),
			b.MaxPending.Round(time.Millisecond), b.StillPending)
	}
	for _, rs := range r.Replicas {
		fmt.Fprintf(out, "  replica %d: routed %d", rs.Replica, rs.Routed)
		if p := rs.Peers; p != nil {
			fmt.Fprintf(out, "; sent %d batches (%d events, %d deliveries lost); applied %d peer events from %d batches (%d gaps, %d expired)",
				rs.Batches, rs.Events, rs.Lost, p.Events, p.Batches, p.Gaps, p.Expired)
			if len(p.Refused) > 0 {
				fmt.Fprintf(out, ", refused %s", formatCounts(p.Refused))
			}
		}
		fmt.Fprintln(out)
	}
	if r.Recording != nil {
		var written, dropped uint64
		for _, n := range r.Recording.Written {
			written += n
		}
		for _, n := range r.Recording.Dropped {
			dropped += n
		}
		fmt.Fprintf(out, "  recorded %d records (%d dropped)\n", written, dropped)
	}
}

// formatCounts renders counts as "a 3, b 1", largest first.
func formatCounts(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
