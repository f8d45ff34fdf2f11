package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"switchyard/recorder"
	"switchyard/sim/replay"
)

func init() { register(newReplayCmd) }

func newReplayCmd() *cobra.Command {
	var (
		runID           int64
		pickerName      string
		counterfactual  string
		asJSON          bool
		allowIncomplete bool
	)
	cmd := &cobra.Command{
		Use:   "replay RECORDING",
		Short: "Feed a recording's inputs through a fresh core and check its selections",
		Long: "Replay the recorded inputs (discovery, load messages, requests) through a fresh\n" +
			"routing core in virtual time. Without --picker it checks that every recorded\n" +
			"selection is reproduced, and exits 0 only when all are; with --picker NAME it\n" +
			"reports how often NAME agrees with the recorded decisions and where it diverges.\n" +
			"--counterfactual NAME re-simulates the recorded workload under NAME with the fake\n" +
			"fleet and compares the outcomes.\n\n" +
			"A recording that is incomplete (never closed, so without its end marker; with\n" +
			"gaps in its sequence numbers; with dropped records) is refused with exit status 3:\n" +
			"its replay would prove nothing. --allow-incomplete replays it anyway, with a warning.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rd, err := recorder.Open(args[0])
			if err != nil {
				return &exitError{2, err}
			}
			defer rd.Close()
			out := cmd.OutOrStdout()
			integrity, err := replay.Check(rd, runID)
			if err != nil && !errors.Is(err, replay.ErrIncomplete) {
				return &exitError{2, err}
			}
			if err != nil {
				if !allowIncomplete {
					return &exitError{3, fmt.Errorf("%s: run %d is incomplete; replay it anyway with --allow-incomplete\n%s",
						args[0], integrity.RunID, strings.TrimSuffix(incompleteLines(integrity), "\n"))}
				}
				// The report goes on: the warning precedes it (on stderr
				// when stdout carries JSON).
				warn := out
				if asJSON {
					warn = cmd.ErrOrStderr()
				}
				fmt.Fprint(warn, incompleteLines(integrity))
			}
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
			rep, err := replay.RunWith(rd, runID, pickerName, replay.Options{AllowIncomplete: allowIncomplete})
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
	cmd.Flags().BoolVar(&allowIncomplete, "allow-incomplete", false,
		"replay a recording without its end marker, with sequence gaps or drops (warned, not refused)")
	return cmd
}

// incompleteLines is one warning line per problem of an incomplete run.
func incompleteLines(in recorder.Integrity) string {
	var b strings.Builder
	for _, p := range in.Problems() {
		fmt.Fprintf(&b, "recording incomplete: %s\n", p)
	}
	return b.String()
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
	switch {
	case r.Exact() && len(r.Incomplete) > 0:
		fmt.Fprintln(out, "  every recorded selection reproduced, but the recording is incomplete (see above)")
	case r.Exact():
		fmt.Fprintln(out, "  every selection reproduced")
	}
}
