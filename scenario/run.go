// Package scenario runs scenario files — a fleet, a workload, a timeline
// of faults and the expectations the run must meet — simulated, live on
// loopback, or both, and reports each expectation's verdict as text, JUnit
// XML and an HTML report with the faults drawn over the run's charts.
package scenario

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"switchyard/recorder"
	"switchyard/router/core"
	"switchyard/scenario/expect"
	"switchyard/sim"
)

// Mode chooses where a scenario runs.
type Mode string

const (
	// Sim runs the scenario in the discrete-event simulator.
	Sim Mode = "sim"
	// Live runs it against an embedded etcd, the fake fleet and the
	// router on loopback, in wall time.
	Live Mode = "live"
	// Both runs it both ways and reports how far the two agree.
	Both Mode = "both"
)

// ParseMode reads a --mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Sim, Live, Both:
		return m, nil
	}
	return "", fmt.Errorf("mode %q: want sim, live or both", s)
}

// Options configure a suite run.
type Options struct {
	Mode Mode
	// ReportDir, when set, receives one directory per scenario (the HTML
	// report, result.json, the runs' recordings) and an index.html.
	ReportDir string
	// TimeScale divides a live run's times (see docs/scenarios.md).
	TimeScale float64
	Log       *slog.Logger

	// brokenPicker, set by tests only, routes the simulated run with this
	// picker instead of the scenario's: a deliberately broken router.
	brokenPicker string
}

// Result is one scenario's run in every mode asked for.
type Result struct {
	Path string `json:"path"`
	Name string `json:"name"`
	// Error is set when the file could not be read or validated.
	Error     string      `json:"error,omitempty"`
	Sim       *ModeResult `json:"sim,omitempty"`
	Live      *ModeResult `json:"live,omitempty"`
	Agreement *Agreement  `json:"agreement,omitempty"`

	scenario *sim.Scenario
}

// ModeResult is one run of a scenario and its verdicts.
type ModeResult struct {
	Mode string `json:"mode"`
	// Error: the run could not happen (a setup failure); Skipped: the
	// mode cannot reproduce this scenario, and why.
	Error    string           `json:"error,omitempty"`
	Skipped  string           `json:"skipped,omitempty"`
	Requests int              `json:"requests"`
	Served   int              `json:"served"`
	Verdicts []expect.Verdict `json:"verdicts"`
	// Notes are what a reader of the verdicts should know (a live fault
	// injected late).
	Notes []string `json:"notes,omitempty"`
	// Wall is how long the run took; kept out of result.json, which is
	// the same byte for byte for a seed in sim mode.
	Wall time.Duration `json:"-"`

	evidence *expect.Evidence
}

// Passed reports whether the run happened and every expectation held. A
// skipped run neither passes nor fails.
func (m *ModeResult) Passed() bool {
	return m != nil && m.Error == "" && m.Skipped == "" && len(expect.Failed(m.Verdicts)) == 0
}

// Failed reports whether the run failed (an error or an expectation).
func (m *ModeResult) Failed() bool {
	return m != nil && m.Skipped == "" && (m.Error != "" || len(expect.Failed(m.Verdicts)) > 0)
}

// Failed reports whether anything in the scenario's result failed.
func (r *Result) Failed() bool { return r.Error != "" || r.Sim.Failed() || r.Live.Failed() }

// Files expands arguments into scenario files: a file stands for itself, a
// directory for every *.yaml and *.yml below it, in lexical order.
func Files(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, a)
			continue
		}
		var found []string
		err = filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
				found = append(found, p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: no scenario files (*.yaml) found", a)
		}
		slices.Sort(found)
		out = append(out, found...)
	}
	return out, nil
}

// RunFile reads one scenario file and runs it in the modes o asks for.
func RunFile(ctx context.Context, path string, o Options) *Result {
	res := &Result{Path: path, Name: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))}
	sc, err := sim.LoadScenario(path)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	if sc.Name != "" {
		res.Name = sc.Name
	}
	res.scenario = sc
	dir := ""
	if o.ReportDir != "" {
		dir = filepath.Join(o.ReportDir, slug(res.Name))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			res.Error = err.Error()
			return res
		}
	}
	record := func(mode Mode) string {
		if dir == "" {
			return ""
		}
		return filepath.Join(dir, string(mode)+".db")
	}
	if o.Mode == Sim || o.Mode == Both || o.Mode == "" {
		res.Sim = runSim(sc, o, record(Sim))
	}
	if o.Mode == Live || o.Mode == Both {
		res.Live = runLive(ctx, sc, o, record(Live))
	}
	if res.Sim != nil && res.Live != nil && res.Sim.evidence != nil && res.Live.evidence != nil {
		res.Agreement = Agree(res.Sim.evidence, res.Live.evidence, len(workerLabels(sc)))
		res.Agreement.countVerdicts(res.Sim.Verdicts, res.Live.Verdicts)
	}
	if dir != "" {
		if err := writeScenarioReport(dir, res); err != nil {
			res.Error = err.Error()
		}
	}
	return res
}

// slug is a scenario name safe as a directory name.
func slug(name string) string {
	s := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '-'
	}, name)
	if s == "" || s[0] == '.' {
		s = "scenario" + s
	}
	return s
}

// teePort hands every output to each of its ports (the recording, then
// the collector, added once the run has drawn its fleet).
type teePort struct{ ports []core.Port }

func (p *teePort) Record(out core.Output) {
	for _, q := range p.ports {
		q.Record(out)
	}
}

func sloOf(sc *sim.Scenario) expect.SLO {
	return expect.SLO{TTFT: sc.SLO.TTFT.Std(), ITL: sc.SLO.ITL.Std()}
}

// runSim simulates sc and judges it.
func runSim(sc *sim.Scenario, o Options, recordPath string) *ModeResult {
	m := &ModeResult{Mode: string(Sim)}
	start := time.Now()
	defer func() { m.Wall = time.Since(start) }()
	port := &teePort{}
	var w *recorder.Writer
	if recordPath != "" {
		_ = os.Remove(recordPath)
		var err error
		w, err = recorder.Create(recordPath, recorder.Run{Kind: "sim", Scenario: sc.YAML(), Seed: sc.Seed,
			Picker: sc.Picker, Start: sim.Epoch}, recorder.Options{Block: true})
		if err != nil {
			m.Error = err.Error()
			return m
		}
		port.ports = append(port.ports, core.WithoutTokens(w))
	}
	run, err := sim.New(sc, sim.Options{Record: port, Picker: o.brokenPicker, Log: o.Log})
	if err != nil {
		m.Error = err.Error()
		if w != nil {
			_, _ = w.Close()
		}
		return m
	}
	col := expect.NewCollector(sim.Epoch, run.WorkerIDs(), sloOf(sc))
	port.ports = append(port.ports, col)
	sum, err := run.Execute()
	if w != nil {
		if _, cerr := w.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		m.Error = err.Error()
		return m
	}
	m.Requests, m.Served = sum.Requests, sum.Served
	m.evidence = col.Evidence()
	m.Verdicts = expectations(sc, m.evidence)
	return m
}

// expectations judges a run's evidence against the scenario.
func expectations(sc *sim.Scenario, ev *expect.Evidence) []expect.Verdict {
	return expect.Evaluate(sc.Expect, ev)
}

// evidenceFromRecording reads one recorded run's outputs into evidence,
// its times multiplied by scale (a live run's TimeScale) so they read in
// scenario time.
func evidenceFromRecording(path string, runID int64, start time.Time, ids []uint64, slo expect.SLO, scale float64) (*expect.Evidence, error) {
	r, err := recorder.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	col := expect.NewCollector(start, ids, slo)
	col.SetTimeScale(scale)
	err = r.Entries(runID, func(e recorder.Entry) error {
		if out, ok := e.Value.(core.Output); ok {
			col.Record(out)
		}
		return nil
	})
	return col.Evidence(), err
}
