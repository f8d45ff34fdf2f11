package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"switchyard/scenario"
	"switchyard/sim"
)

func init() { register(newScenarioCmd) }

func newScenarioCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "scenario",
		Short: "Run scenario suites: fleets, workloads, fault timelines and expectations (docs/scenarios.md)",
	}
	cmd.AddCommand(newScenarioRunCmd(), newScenarioValidateCmd())
	return cmd
}

func newScenarioRunCmd() *cobra.Command {
	var (
		mode, junit, report string
		timeScale           float64
		logs                logFlags
	)
	cmd := &cobra.Command{
		Use:   "run FILE|DIR... [--mode sim|live|both] [--junit FILE] [--report DIR]",
		Short: "Run scenarios and check their expectations; exit 1 if any fails",
		Long: "Run every scenario file given (a directory stands for the *.yaml files below it),\n" +
			"simulated (the default), live against an embedded etcd, the fake fleet and the router on\n" +
			"loopback, or both, and check each scenario's expectations. The exit status is 0 only when\n" +
			"every expectation of every run holds; a scenario live mode cannot reproduce is reported\n" +
			"as skipped. --junit writes JUnit XML for CI systems, --report an HTML report per scenario\n" +
			"with the faults drawn over its latency and load charts.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := logs.logger()
			if err != nil {
				return err
			}
			m, err := scenario.ParseMode(mode)
			if err != nil {
				return &exitError{2, err}
			}
			files, err := scenario.Files(args)
			if err != nil {
				return &exitError{2, err}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			results := scenario.RunAll(ctx, files, scenario.Options{Mode: m, ReportDir: report, TimeScale: timeScale, Log: log},
				func(r *scenario.Result) { scenario.Print(out, r) })
			if junit != "" {
				if err := writeJUnitFile(junit, results); err != nil {
					return err
				}
			}
			if report != "" {
				if err := scenario.WriteIndex(report, results); err != nil {
					return err
				}
			}
			t := scenario.Count(results)
			fmt.Fprintf(out, "%d passed, %d failed, %d skipped (%d scenario files)\n", t.Passed, t.Failed, t.Skipped, len(results))
			if ctx.Err() != nil {
				return &exitError{1, errors.New("interrupted")}
			}
			if t.Failed > 0 {
				return &exitError{1, fmt.Errorf("%d scenario runs failed", t.Failed)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&mode, "mode", "sim", "sim, live or both")
	cmd.Flags().StringVar(&junit, "junit", "", "write JUnit XML results to this file")
	cmd.Flags().StringVar(&report, "report", "", "write an HTML report per scenario (and the runs' recordings) under this directory")
	cmd.Flags().Float64Var(&timeScale, "time-scale", 1, "live mode: divide the scenario's times by this factor (docs/scenarios.md)")
	logs.add(cmd)
	// A suite's runs log their faults' consequences at info; the verdicts
	// are what a CI log should show.
	level := cmd.Flags().Lookup("log-level")
	level.DefValue = "warn"
	_ = level.Value.Set("warn")
	return cmd
}

func writeJUnitFile(path string, results []*scenario.Result) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := scenario.WriteJUnit(f, results); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func newScenarioValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE|DIR...",
		Short: "Check scenario files without running them (every problem, with its field path)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := scenario.Files(args)
			if err != nil {
				return &exitError{2, err}
			}
			bad := 0
			for _, f := range files {
				if _, err := sim.LoadScenario(f); err != nil {
					bad++
					fmt.Fprintln(cmd.OutOrStdout(), err)
				}
			}
			if bad > 0 {
				return &exitError{1, fmt.Errorf("%d of %d scenario files are invalid", bad, len(files))}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d scenario files are valid\n", len(files))
			return nil
		},
	}
}
