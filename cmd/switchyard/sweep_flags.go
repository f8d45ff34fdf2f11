package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"switchyard/reports"
	"switchyard/sweep"
	"switchyard/sweep/job"
)

// sweepFlags are the flags that turn a command into a sweep (docs/sweeps.md):
// the grid, one cell of it run here, or the Kubernetes Job that runs them all.
type sweepFlags struct {
	specs                                         []string
	cell                                          int
	emitJob                                       string
	image, claim, cpu, memory, jobName, namespace string
	inputsClaim                                   string
	parallelism, retries                          int
}

// Flags that shape the Job rather than a cell: left out of the cells' command.
var jobOnlyFlags = []string{"emit-job", "image", "results-claim", "cpu", "memory", "job-name", "namespace", "job-parallelism", "retries", "inputs-claim"}

// Flags the Job sets per completion index.
var perCellFlags = []string{"cell", "out"}

// speedFlags change how fast a cell runs, never its result: they are kept in the Job's
// command but out of the sweep's fingerprint.
var speedFlags = []string{"parallel"}

// defaultJobParallelism is how many cells run at once when --job-parallelism is not given.
const defaultJobParallelism = 8

func addSweepFlags(fl *pflag.FlagSet, s *sweepFlags) {
	fl.StringArrayVar(&s.specs, "sweep", nil, "sweep a flag over values, NAME=V1,V2,... (repeat for a grid; docs/sweeps.md)")
	fl.IntVar(&s.cell, "cell", -1, "run only this cell of the --sweep grid (0-based), as the Job's pods do; needs --out")
	fl.StringVar(&s.emitJob, "emit-job", "", "write DIR/job.yaml, a Kubernetes Indexed Job running one cell per index, instead of running")
	fl.StringVar(&s.image, "image", "", "with --emit-job: the switchyard container image the cells run")
	fl.StringVar(&s.claim, "results-claim", "switchyard-sweep-results", "with --emit-job: the PersistentVolumeClaim the cells write their reports to")
	fl.StringVar(&s.inputsClaim, "inputs-claim", "", "with --emit-job: a PersistentVolumeClaim holding the traces and recordings, mounted read-only (default: every input in a ConfigMap)")
	fl.StringVar(&s.cpu, "cpu", "1", "with --emit-job: CPU request of each cell's pod (\"\" = none)")
	fl.StringVar(&s.memory, "memory", "2Gi", "with --emit-job: memory request and limit of each cell's pod (\"\" = none)")
	fl.StringVar(&s.jobName, "job-name", "", "with --emit-job: the Job's name (default switchyard-sweep-<sweep id>)")
	fl.StringVar(&s.namespace, "namespace", "", "with --emit-job: the Job's namespace (default: kubectl's)")
	fl.IntVar(&s.parallelism, "job-parallelism", 0, fmt.Sprintf("with --emit-job: cells run at once (default min(cells, %d))", defaultJobParallelism))
	fl.IntVar(&s.retries, "retries", 1, "with --emit-job: how often one cell may fail before the Job gives it up (backoffLimitPerIndex)")
}

// active says whether any sweep flag was given: otherwise the command runs as always.
func (s *sweepFlags) active(fl *pflag.FlagSet) bool {
	for _, n := range append([]string{"sweep", "cell"}, jobOnlyFlags...) {
		if fl.Changed(n) {
			return true
		}
	}
	return false
}

// sweepPlan is a command's sweep: its grid and the command every cell shares.
type sweepPlan struct {
	kind    string   // "bench pickers", "tune"
	command []string // the subcommand path and every shared flag
	id      string
	grid    sweep.Grid
}

// sweepable maps the names --sweep takes (a flag's name, or its plural) to the flag.
type sweepable map[string]string

func sweepableFlags(flags ...string) sweepable {
	m := sweepable{}
	for _, f := range flags {
		m[f], m[f+"s"] = f, f
	}
	return m
}

func (s sweepable) names() string {
	var out []string
	for k, v := range s {
		if k == v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// newSweepPlan checks the sweep flags of cmd and reads its grid. fresh builds another
// command of the same kind, on which each swept value is tried as the flag would take it.
// extra dimensions (tune's knob grid) come after the user's.
func newSweepPlan(cmd *cobra.Command, kind string, s *sweepFlags, can sweepable, fresh func() *cobra.Command, extra ...sweep.Dimension) (*sweepPlan, error) {
	fl := cmd.Flags()
	switch {
	case s.cell >= 0 && s.emitJob != "":
		return nil, errors.New("give --cell N (run one cell here) or --emit-job DIR (write the Job), not both")
	case fl.Changed("cell") && s.cell < 0:
		return nil, fmt.Errorf("--cell %d: cells are numbered from 0", s.cell)
	case s.cell < 0 && s.emitJob == "":
		return nil, errors.New("--sweep needs --emit-job DIR (write a Kubernetes Job running every cell) or --cell N (run one cell here)")
	case s.cell >= 0 && !fl.Changed("out"):
		return nil, errors.New("--cell needs --out DIR: the cell's report folder")
	}
	if s.emitJob == "" {
		for _, n := range jobOnlyFlags {
			if fl.Changed(n) {
				return nil, fmt.Errorf("--%s applies to --emit-job only", n)
			}
		}
	}
	dims := make([]sweep.Dimension, 0, len(s.specs)+len(extra))
	if len(s.specs) > sweep.MaxDimensions {
		return nil, fmt.Errorf("--sweep: %d dimensions, at most %d", len(s.specs), sweep.MaxDimensions)
	}
	for _, spec := range s.specs {
		d, err := sweep.ParseDimension(spec)
		if err != nil {
			return nil, err
		}
		name, ok := can[d.Name]
		if !ok {
			return nil, fmt.Errorf("--sweep %s: %s cannot be swept by %s (sweepable: %s)", spec, d.Name, kind, can.names())
		}
		d.Name = name
		if fl.Changed(name) {
			return nil, fmt.Errorf("--sweep %s: --%s is also given; the sweep sets it in each cell", spec, name)
		}
		probe := fresh().Flags()
		for _, v := range d.Values {
			if err := probe.Set(name, v); err != nil {
				return nil, fmt.Errorf("--sweep %s: %s is not a value of --%s: %w", name, v, name, err)
			}
		}
		dims = append(dims, d)
	}
	grid, err := sweep.New(append(dims, extra...))
	if err != nil {
		return nil, err
	}
	command := strings.Fields(kind)
	var fingerprint []string
	var names []string
	fl.Visit(func(f *pflag.Flag) { names = append(names, f.Name) })
	slices.Sort(names)
	for _, n := range names {
		if slices.Contains(jobOnlyFlags, n) || slices.Contains(perCellFlags, n) {
			continue
		}
		var args []string
		if n == "sweep" {
			for _, spec := range s.specs {
				args = append(args, "--sweep="+spec)
			}
		} else {
			args = []string{"--" + n + "=" + fl.Lookup(n).Value.String()}
		}
		command = append(command, args...)
		if !slices.Contains(speedFlags, n) {
			fingerprint = append(fingerprint, args...)
		}
	}
	fingerprint = append(strings.Fields(kind), fingerprint...)
	return &sweepPlan{kind: kind, command: command, id: sweep.ID(fingerprint), grid: grid}, nil
}

// apply sets cmd's flags to cell i's coordinates, as if they had been given on its command
// line, and returns the cell's account for its report. Coordinates of dimensions that are no
// flags (tune's knob grid) are left to the caller.
func (p *sweepPlan) apply(cmd *cobra.Command, i int, objective string) (*reports.Cell, error) {
	coords, err := p.grid.Cell(i)
	if err != nil {
		return nil, err
	}
	for _, c := range coords {
		if cmd.Flags().Lookup(c.Name) == nil {
			continue
		}
		if err := cmd.Flags().Set(c.Name, c.Value); err != nil {
			return nil, fmt.Errorf("cell %d: --%s %s: %w", i, c.Name, c.Value, err)
		}
	}
	// The fingerprint's command, without the speed flags, is what the cell records: cells
	// run with different --parallel still merge.
	var shared []string
	for _, a := range p.command {
		if !slices.ContainsFunc(speedFlags, func(f string) bool { return strings.HasPrefix(a, "--"+f+"=") }) {
			shared = append(shared, a)
		}
	}
	return &reports.Cell{Kind: p.kind, Sweep: p.id, Command: shared, Dimensions: p.grid.Dimensions,
		Index: i, Cells: p.grid.Cells(), Coordinates: coords, Objective: objective}, nil
}

// emitJob writes DIR/job.yaml for the plan, and DIR/inputs.yaml, the ConfigMap carrying the
// files the cells read, when any is not on the inputs claim.
func (p *sweepPlan) emitJob(stdout io.Writer, fl *pflag.FlagSet, s *sweepFlags) error {
	cells := p.grid.Cells()
	par := s.parallelism
	if par == 0 {
		par = min(cells, defaultJobParallelism)
	}
	name := s.jobName
	if name == "" {
		name = "switchyard-sweep-" + p.id
	}
	spec := job.Spec{Name: name, Namespace: s.namespace, Image: s.image, Args: p.command, SweepID: p.id, Cells: cells,
		Parallelism: par, Retries: s.retries, ResultsClaim: s.claim, CPU: s.cpu, Memory: s.memory, InputsClaim: s.inputsClaim}
	if err := spec.Check(); err != nil { // the flags first, then the files
		return &exitError{1, err}
	}
	inputs, err := p.sweepInputs(fl)
	if err != nil {
		return &exitError{1, err}
	}
	spec.Inputs = inputs
	body, err := spec.YAML()
	if err != nil {
		return &exitError{1, err}
	}
	carried, err := spec.InputsYAML()
	if err != nil {
		return &exitError{1, err}
	}
	if err := os.MkdirAll(s.emitJob, 0o755); err != nil {
		return err
	}
	path := filepath.Join(s.emitJob, "job.yaml")
	inputsPath := filepath.Join(s.emitJob, "inputs.yaml")
	if err := os.Remove(inputsPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err // a stale one would be applied with the new Job
	}
	if carried != nil {
		if err := os.WriteFile(inputsPath, carried, 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sweep %s: %d cells, %d at once\n", p.id, cells, par)
	for _, d := range p.grid.Dimensions {
		fmt.Fprintf(stdout, "  %s: %s\n", d.Name, strings.Join(d.Values, ", "))
	}
	for _, in := range inputs {
		from := "inputs.yaml"
		if in.Large && s.inputsClaim != "" {
			from = "claim " + s.inputsClaim
		}
		fmt.Fprintf(stdout, "  input %s %s (%s)\n", in.What, in.Path, from)
	}
	apply := "-f " + path
	if carried != nil {
		fmt.Fprintf(stdout, "inputs: %s (%d bytes of files)\n", inputsPath, len(carried))
		apply = "-f " + inputsPath + " " + apply
	}
	fmt.Fprintf(stdout, "job: %s (kubectl apply %s; then switchyard reports merge <%s's folder> --out DIR)\n", path, apply, s.claim)
	return nil
}
