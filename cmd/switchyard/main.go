// Command switchyard routes LLM requests across an NVIDIA Dynamo fleet.
// Each capability adds a subcommand (serve, config, demo, ...).
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

// subcommands is filled by each command file's init, so files stay independent.
var subcommands []func() *cobra.Command

func register(f func() *cobra.Command) { subcommands = append(subcommands, f) }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "switchyard",
		Short:         "Switchyard routes LLM requests across an NVIDIA Dynamo fleet",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			if _, set := os.LookupEnv("GOGC"); !set {
				debug.SetGCPercent(gcPercentFor(cmd))
			}
		},
	}
	for _, f := range subcommands {
		root.AddCommand(f())
	}
	return root
}

// defaultGCPercent trades a little memory for throughput: a proxy's live
// heap is small and its garbage per request large, so Go's default of 100
// makes it collect far more often than it needs to (the gateway benchmark
// measured about 30% more requests/s at 400). GOGC, when set, wins.
const defaultGCPercent = 400

// offlineGCPercent is for the commands that simulate or replay. Their live
// heap is large (block pools, the router's index, per-request results) but
// almost free of pointers, so Go's default costs them no measurable CPU,
// while 400 multiplied their peak memory by 2.5, once for every
// simulation running at the same time (docs/benchmarks.md).
const offlineGCPercent = 100

// offlineCommands are the top-level commands that run simulations.
var offlineCommands = map[string]bool{"sim": true, "bench": true, "tune": true, "replay": true, "engine": true, "scenario": true}

// gcPercentFor is the GC percent for cmd (a command at any depth).
func gcPercentFor(cmd *cobra.Command) int {
	for cmd.HasParent() && cmd.Parent().HasParent() {
		cmd = cmd.Parent()
	}
	if offlineCommands[cmd.Name()] {
		return offlineGCPercent
	}
	return defaultGCPercent
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(exitCode(err))
	}
}

// exitError carries a specific process exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	if e, ok := err.(*exitError); ok {
		return e.code
	}
	return 1
}
