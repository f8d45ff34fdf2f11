package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/spf13/cobra"

	"switchyard/internal/progress"
	"switchyard/reports"
	"switchyard/sweep"
)

func init() { register(newReportsCmd) }

func newReportsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reports",
		Short: "Work with report folders",
	}
	cmd.AddCommand(newReportsMergeCmd())
	return cmd
}

type reportsMergeFlags struct {
	out          string
	allowMissing bool
}

func newReportsMergeCmd() *cobra.Command {
	var f reportsMergeFlags
	cmd := &cobra.Command{
		Use:   "merge DIR... --out DIR",
		Short: "Join the cells of a sweep into one report",
		Long: "Read the summary.json of every cell of a sweep (bench pickers or tune run with\n" +
			"--cell N, by hand or by the Job --emit-job writes) and write one report folder:\n" +
			"summary.json with every cell's runs under its coordinates, summary.md, and\n" +
			"index.html with each figure charted against each swept dimension. Each DIR is a\n" +
			"cell's folder or a folder of cell folders. A tune sweep also gets tuned.yaml, the\n" +
			"dynamo.kv block its coarse grid recommends. Missing cells are listed and fail\n" +
			"the merge unless --allow-missing (docs/sweeps.md).",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return reportsMerge(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, f)
		},
	}
	cmd.Flags().StringVar(&f.out, "out", "", "the merged report folder (required)")
	cmd.Flags().BoolVar(&f.allowMissing, "allow-missing", false, "merge the cells found even when some are missing")
	return cmd
}

func reportsMerge(stdout, stderr io.Writer, dirs []string, f reportsMergeFlags) error {
	if f.out == "" {
		return &exitError{1, errors.New("--out DIR is required: the merged report folder")}
	}
	paths, err := cellFiles(dirs)
	if err != nil {
		return &exitError{1, err}
	}
	bar := progress.New(stderr, int64(len(paths)), fmt.Sprintf("reading %d cells", len(paths)))
	cells := make([]reports.SweepCell, 0, len(paths))
	for _, p := range paths {
		c, err := reports.ReadCell(p)
		if err != nil {
			return &exitError{1, err}
		}
		cells = append(cells, c)
		bar.Add(1)
	}
	bar.Finish()
	s, err := reports.JoinCells(cells)
	if err != nil {
		return &exitError{1, err}
	}
	fmt.Fprintf(stdout, "sweep %s (%s): %d of %d cells\n", s.ID, s.Kind, len(s.Found), s.Cells)
	if len(s.Missing) > 0 {
		fmt.Fprintf(stdout, "missing cells: %s\n", joinInts(s.Missing))
		if !f.allowMissing {
			return &exitError{1, fmt.Errorf("%d of %d cells are missing (%s): rerun them with --cell N, or merge what there is with --allow-missing",
				len(s.Missing), s.Cells, joinInts(s.Missing))}
		}
	}
	s.Generated = "switchyard " + version
	var tuned []byte
	if s.Kind == "tune" {
		if s.Tuned, tuned, err = tuneFromSweep(s); err != nil {
			return &exitError{1, err}
		}
	}
	if err := reports.WriteSweep(f.out, s); err != nil {
		return err
	}
	if tuned != nil {
		path := filepath.Join(f.out, "tuned.yaml")
		if err := os.WriteFile(path, tuned, 0o644); err != nil {
			return err
		}
		t := s.Tuned.Tuning
		fmt.Fprintf(stdout, "%s: %s current (%s), %s tuned (%s, %+.1f %%)\n", t.Label, fmtKnob(t.Points[t.Current].Value), s.Tuned.Current,
			fmtKnob(t.Points[t.Tuned].Value), s.Tuned.Tuned, s.Tuned.Gain*100)
		fmt.Fprintf(stdout, "dynamo.kv block: %s\n", path)
	}
	fmt.Fprintf(stdout, "report: %s\n", filepath.Join(f.out, "index.html"))
	return nil
}

// cellFiles are the summary.json files of the folders: a folder holding one is a cell, any
// other folder's subfolders holding one are cells. The list is sorted: the merge does not
// depend on the order folders are listed in.
func cellFiles(dirs []string) ([]string, error) {
	var out []string
	for _, d := range dirs {
		direct := filepath.Join(d, "summary.json")
		if _, err := os.Stat(direct); err == nil {
			out = append(out, direct)
			continue
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			return nil, err
		}
		found := 0
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			p := filepath.Join(d, e.Name(), "summary.json")
			if _, err := os.Stat(p); err == nil {
				out = append(out, p)
				found++
			}
		}
		if found == 0 {
			return nil, fmt.Errorf("%s: neither a cell (no summary.json) nor a folder of cells", d)
		}
		if len(out) > 2*sweep.MaxCells {
			return nil, fmt.Errorf("more than %d cell folders: a sweep has at most %d cells", 2*sweep.MaxCells, sweep.MaxCells)
		}
	}
	sort.Strings(out)
	out = slices.Compact(out) // a folder given twice is read once
	return out, nil
}

func joinInts(v []int) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprint(x)
	}
	return s
}
