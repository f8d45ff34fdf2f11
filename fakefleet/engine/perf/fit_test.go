package perf

import (
	"errors"
	"math"
	"slices"
	"testing"

	"switchyard/fakefleet/engine"
)

func rosenbrock(x []float64) float64 {
	a, b := 1-x[0], x[1]-x[0]*x[0]
	return a*a + 100*b*b
}

func TestNelderMeadFindsRosenbrockMinimum(t *testing.T) {
	x, f, evals := nelderMead(rosenbrock, []float64{-1.2, 1}, []float64{0.5, 0.5}, 2000, 1e-12)
	if math.Abs(x[0]-1) > 1e-3 || math.Abs(x[1]-1) > 1e-3 || f > 1e-6 {
		t.Fatalf("minimum at %v (f %v after %d evaluations), want (1, 1)", x, f, evals)
	}
}

func TestNelderMeadSixDimensionsAndDeterminism(t *testing.T) {
	want := []float64{3, -2, 0.5, 10, -7, 1}
	f := func(x []float64) float64 {
		s := 0.0
		for i := range x {
			d := x[i] - want[i]
			s += float64(i+1) * d * d
		}
		return s
	}
	x0, step := make([]float64, 6), []float64{1, 1, 1, 1, 1, 1}
	x, _, _ := nelderMead(f, x0, step, 5000, 1e-14)
	for i := range want {
		if math.Abs(x[i]-want[i]) > 1e-3 {
			t.Fatalf("x = %v, want %v", x, want)
		}
	}
	again, _, _ := nelderMead(f, x0, step, 5000, 1e-14)
	if !slices.Equal(x, again) {
		t.Fatal("two runs from the same start must agree exactly")
	}
	if _, _, evals := nelderMead(f, x0, step, 50, 0); evals > 50+7 {
		t.Fatalf("%d evaluations with a budget of 50", evals)
	}
}

// TestFitRecoversKnownCoefficients prices synthetic steps with known
// coefficients and checks Fit, starting from the defaults, finds them
// again from the step times alone (the all-reduce latency held at its
// true value: at one TP size it cannot be told from the step overhead).
func TestFitRecoversKnownCoefficients(t *testing.T) {
	truth := testProfile()
	truth.TP = 2
	truth.Coefficients = Coefficients{MatmulEfficiency: 0.45, AttentionEfficiency: 0.3, BandwidthEfficiency: 0.7,
		KVBandwidthEfficiency: 0.85, StepOverheadUs: 900, SeqOverheadUs: 25, AllReduceUs: 15}
	var steps []engine.Step
	for _, batch := range []int{1, 8, 64, 200} {
		for _, base := range []int{300, 3000} {
			ctx := make([]int, batch)
			for i := range ctx {
				ctx[i] = base + 50*i
			}
			steps = append(steps, decode(ctx...))
		}
	}
	for _, c := range []engine.Chunk{{NewTokens: 2048}, {NewTokens: 512, Context: 3000}, {NewTokens: 2048, Context: 8000}, {NewTokens: 128}} {
		steps = append(steps, prefill(c))
	}
	measured := make([]float64, len(steps))
	for i, s := range steps {
		measured[i] = truth.Timing().StepTime(s).Seconds()
	}
	loss := func(p Profile) (float64, error) {
		r, sum := p.Timing(), 0.0
		for i, s := range steps {
			e := r.StepTime(s).Seconds()/measured[i] - 1
			sum += e * e
		}
		return sum, nil
	}
	start := truth
	start.Coefficients = DefaultCoefficients
	params := DefaultFitParams[:6] // request_ms plays no part in a step
	start.Coefficients.AllReduceUs = truth.Coefficients.AllReduceUs
	got, err := Fit(start, loss, FitOptions{Params: params, MaxEvals: 3000, Tol: 1e-12})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range params {
		g, _ := field(&got, name)
		w, _ := field(&truth, name)
		if math.Abs(*g / *w - 1) > 0.03 {
			t.Errorf("%s = %v, want %v", name, *g, *w)
		}
	}
	if got.Fit == nil || got.Fit.Evaluations == 0 || got.Fit.Objective > 1e-6 {
		t.Fatalf("fit record %+v", got.Fit)
	}
}

func TestFitErrors(t *testing.T) {
	p := testProfile()
	if _, err := Fit(p, func(Profile) (float64, error) { return 0, nil }, FitOptions{Params: []string{"warp_factor"}}); !errors.Is(err, ErrFit) {
		t.Fatalf("unknown parameter: %v", err)
	}
	boom := errors.New("simulation failed")
	if _, err := Fit(p, func(Profile) (float64, error) { return 0, boom }, FitOptions{}); !errors.Is(err, boom) {
		t.Fatalf("a loss error must end the fit: %v", err)
	}
}

func TestFitStartsAnUnsetPCIeLatencyAtTheGenericValue(t *testing.T) {
	truth := testProfile()
	truth.TP, truth.GPU.Interconnect = 2, "PCIe Gen4 x16"
	truth.Coefficients.PCIeCollectiveUs = 150
	s := decode(1000, 2000)
	want := truth.Timing().StepTime(s).Seconds()
	start := truth
	start.Coefficients.PCIeCollectiveUs = 0
	first := -1.0 // the latency of the first candidate evaluated
	loss := func(p Profile) (float64, error) {
		if first < 0 {
			first = p.Coefficients.PCIeCollectiveUs
		}
		e := p.Timing().StepTime(s).Seconds()/want - 1
		return e * e, nil
	}
	got, err := Fit(start, loss, FitOptions{Params: []string{"pcie_collective_us"}, MaxEvals: 200, Tol: 1e-12})
	if err != nil {
		t.Fatal(err)
	}
	if first != DefaultCoefficients.PCIeCollectiveUs {
		t.Errorf("the search started at %v µs, want the generic %v", first, DefaultCoefficients.PCIeCollectiveUs)
	}
	if v := got.Coefficients.PCIeCollectiveUs; math.Abs(v/150-1) > 0.01 {
		t.Errorf("pcie_collective_us = %v, want 150", v)
	}
}
