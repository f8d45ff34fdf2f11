package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"switchyard/recorder"
	"switchyard/sim/replay"
)

func init() { register(newReplayCmd) }

func newReplayCmd() *cobra.Command {
	var (
		runID          int64
		pickerName     string
		counterfactual string
		asJSON         bool
	)
	cmd := &cobra.Command{
		Use:   "replay RECORDING",
		Short: "Feed a recording's inputs through a fresh core and check its selections",
		Long: "Replay the recorded inputs (discovery, load messages, requests) through a fresh\n" +
			"routing core in virtual time. Without --picker it checks that every recorded\n" +
			"selection is reproduced, and exits 0 only when all are; with --picker NAME it\n" +
			"reports how often NAME agrees with the recorded decisions and where it diverges.\n" +
			"--counterfactual NAME re-simulates the recorded workload under NAME with the fake\n" +
			"fleet and compares the outcomes.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rd, err := recorder.Open(args[0])
			if err != nil {
				return &exitError{2, err}
			}
			defer rd.Close()
			out := cmd.OutOrStdout()
			if counterfactual != "" {
				cf, err := replay.Counterfactual(rd, runID, counterfactual)
				if err != nil {
					return &exitError{2, err}
				}
				if asJSON {
					return writeJSON(out, cf)
				}
				cf.Print(out)
				return nil
			}
			rep, err := replay.Run(rd, runID, pickerName)
			if err != nil {
				code := 2
				if errors.Is(err, replay.ErrIncomplete) {
					code = 3
				}
				return &exitError{code, err}
			}
			if asJSON {
				if err := writeJSON(out, rep); err != nil {
					return err
				}
			} else {
				printReplay(out, rep)
			}
			if pickerName == "" && !rep.Exact() {
				return &exitError{1, fmt.Errorf("replay diverged: %d of %d selections reproduced", rep.Reproduced, rep.Selections)}
			}
			return nil
		},
	}
	cmd.Flags().Int64Var(&runID, "run", 0, "run id inside the recording (default: the last run)")
	cmd.Flags().StringVar(&pickerName, "picker", "", "replay under this picker and report agreement")
	cmd.Flags().StringVar(&counterfactual, "counterfactual", "", "re-simulate the recorded workload under this picker")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printReplay(out io.Writer, r *replay.Report) {
	pct := func(n int) float64 {
		if r.Selections == 0 {
			return 100
		}
		return 100 * float64(n) / float64(r.Selections)
	}
	fmt.Fprintf(out, "run %d (%s), recorded picker %s, replayed with %s: %d inputs, %d selections\n",
		r.RunID, r.Kind, r.Recorded, r.Picker, r.Inputs, r.Selections)
	fmt.Fprintf(out, "  reproduced %d (%.2f%%); decode pin agrees %.2f%%, prefill pin %.2f%%\n",
		r.Reproduced, pct(r.Reproduced), pct(r.DecodeAgree), pct(r.PrefillAgree))
	if r.GenerationMismatches > 0 || r.LoadResultMismatches > 0 {
		fmt.Fprintf(out, "  input handling differed: %d publishes, %d load messages\n", r.GenerationMismatches, r.LoadResultMismatches)
	}
	for i, d := range r.Divergences {
		if i == 10 {
			fmt.Fprintf(out, "  ... %d more listed with --json\n", len(r.Divergences)-10)
			break
		}
		fmt.Fprintf(out, "  seq %d at %v, request %d: recorded %s; replayed %s\n",
			d.Seq, d.At.Round(time.Microsecond), d.RequestID, d.Recorded, d.Replayed)
	}
	if r.Exact() {
		fmt.Fprintln(out, "  every selection reproduced")
	}
}
