package validate

import (
	"errors"
	"math"
	"path/filepath"
	"testing"

	"switchyard/internal/groundtruth"
)

// The calibration-set tests read the real measurements through
// SWITCHYARD_GROUNDTRUTH_DIR: skipped when absent, a failure under CI.

func loadCalibration(t *testing.T, id string) *groundtruth.Experiment {
	t.Helper()
	exp, err := groundtruth.Load(filepath.Join(groundtruth.RequireCalibration(t), id))
	if err != nil {
		t.Fatal(err)
	}
	return exp
}

// TestScoringReproducesTheREADME: BLIS trained-physics on a09/a13/a16/a49
// scores E2E mean 6.7 %, TTFT mean 19.0 %, TPOT 6.9 % in the data's README;
// our scoring must give the same figures.
func TestScoringReproducesTheREADME(t *testing.T) {
	var errs []PE
	for _, id := range []string{"a09-mixtral-8x7b-tp2-general", "a13-qwen3-14b-tp1-general",
		"a16-llama-3-1-8b-tp1-general", "a49-mixtral-8x22b-tp8-general"} {
		e, ok := ScoreBaseline(loadCalibration(t, id), "blis_trained_physics")
		if !ok {
			t.Fatalf("%s has no blis_trained_physics baseline", id)
		}
		errs = append(errs, e.Summary)
	}
	a := Summarize(errs)
	for m, want := range map[Metric]float64{E2EMean: 6.7, TTFTMean: 19.0, TPOT: 6.9} {
		if got := math.Round(a.MAPE[m]*10) / 10; got != want {
			t.Errorf("%s MAPE %.2f, want %.1f", m, a.MAPE[m], want)
		}
	}
}

// TestCalibrationExperimentsSimulate runs one experiment of each kind on
// the mocker model: every measured stage gets a prediction with its
// requests completed, and the unsimulatable ones say why.
func TestCalibrationExperimentsSimulate(t *testing.T) {
	for _, id := range []string{"c64-qwen2-5-7b-instruct-tp1-roleplay", "d-rtx4090-llama-3.1-8b-tp1", "e-codellama-34b-tp1-prefill-mnbt64"} {
		exp := loadCalibration(t, id)
		setup, err := Mocker(exp)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		pred, err := Run(exp, setup, 1)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if len(pred.Stages) != len(exp.Measured.Stages) || pred.Summary.Completed == 0 {
			t.Fatalf("%s: %d stages for %d measured, summary %+v", id, len(pred.Stages), len(exp.Measured.Stages), pred.Summary)
		}
		for _, pe := range Score(exp, pred).Summary {
			if math.IsNaN(pe) || math.IsInf(pe, 0) {
				t.Fatalf("%s: summary errors %v", id, Score(exp, pred).Summary)
			}
		}
		if exp.Workload.Kind == groundtruth.RequestTrace && len(pred.Requests) != len(exp.Requests) {
			t.Fatalf("%s: %d request timings for %d requests", id, len(pred.Requests), len(exp.Requests))
		}
	}
	if err := Check(loadCalibration(t, "c17-llama-4-scout-17b-16e-tp2-general-lite")); !errors.Is(err, ErrNotSimulatable) {
		t.Errorf("a partial recipe: %v", err)
	}
	if _, err := Mocker(loadCalibration(t, "e-llama-2-7b-tp1-train-mnbt4096")); !errors.Is(err, ErrNotSimulatable) {
		t.Errorf("an unknown GPU without logged KV capacity: %v", err)
	}
}

// BenchmarkRunCalibration simulates the calibration set's largest
// per-stage experiment (a16: 16,800 requests of 248 tokens over two
// stages) on the mocker model; requests/s is simulated requests per second
// of wall time.
func BenchmarkRunCalibration(b *testing.B) {
	exp, err := groundtruth.Load(filepath.Join(groundtruth.RequireCalibration(b), "a16-llama-3-1-8b-tp1-general"))
	if err != nil {
		b.Fatal(err)
	}
	setup, err := Mocker(exp)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Run(exp, setup, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(16800*b.N)/b.Elapsed().Seconds(), "requests/s")
}
