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
	params := []string{"matmul_efficiency", "attention_efficiency", "bandwidth_efficiency", "kv_bandwidth_efficiency",
		"step_overhead_us", "seq_overhead_us"} // request_ms plays no part in a step
	start.Coefficients.AllReduceUs = truth.Coefficients.AllReduceUs
	start.Coefficients.AllReduceDoublingUs = truth.Coefficients.AllReduceDoublingUs
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

// TestFitStartsAnUnsetPCIeLatencyAtTheGenericValue: a PCIe latency the
// profile leaves unset is fitted from the generic value, not from zero,
// and recovered from a TP step over PCIe.
func TestFitStartsAnUnsetPCIeLatencyAtTheGenericValue(t *testing.T) {
	for _, tc := range []struct {
		param        string
		tp           int
		truth, start float64
	}{
		{"pcie_collective_us", 2, 150, GenericPCIeCollectiveUs},
		{"pcie_hop_us", 4, 90, DefaultCoefficients.PCIeHopUs},
	} {
		truth := testProfile()
		truth.TP, truth.GPU.Interconnect = tc.tp, "PCIe Gen4 x16"
		ptr, _ := field(&truth, tc.param)
		*ptr = tc.truth
		s := decode(1000, 2000)
		want := truth.Timing().StepTime(s).Seconds()
		start := truth
		ptr, _ = field(&start, tc.param)
		*ptr = 0
		first := -1.0 // the latency of the first candidate evaluated
		loss := func(p Profile) (float64, error) {
			if first < 0 {
				v, _ := field(&p, tc.param)
				first = *v
			}
			e := p.Timing().StepTime(s).Seconds()/want - 1
			return e * e, nil
		}
		got, err := Fit(start, loss, FitOptions{Params: []string{tc.param}, MaxEvals: 200, Tol: 1e-12})
		if err != nil {
			t.Fatal(err)
		}
		if first != tc.start {
			t.Errorf("%s: the search started at %v µs, want the generic %v", tc.param, first, tc.start)
		}
		if v, _ := field(&got, tc.param); math.Abs(*v/tc.truth-1) > 0.01 {
			t.Errorf("%s = %v, want %v", tc.param, *v, tc.truth)
		}
	}
}

// TestFitRecoversTheSamplingTime: the sampler's time per logit is fitted
// from zero only when named, starting at the generic value, and recovered
// from steps whose sequence counts and vocabularies differ.
func TestFitRecoversTheSamplingTime(t *testing.T) {
	truth := testProfile()
	truth.Coefficients.SamplingNsPerLogit = 0.3
	big := truth
	big.Model.VocabSize = 250_000
	steps := []engine.Step{decode(100), decode(100, 200, 300, 400), decode(make([]int, 64)...)}
	var want []float64
	for _, p := range []Profile{truth, big} {
		for _, s := range steps {
			want = append(want, p.Timing().StepTime(s).Seconds())
		}
	}
	start := truth
	start.Coefficients.SamplingNsPerLogit = 0
	first := -1.0
	loss := func(p Profile) (float64, error) {
		if first < 0 {
			first = p.Coefficients.SamplingNsPerLogit
		}
		var sum float64
		q := p
		q.Model.VocabSize = big.Model.VocabSize
		for i, pp := range []Profile{p, q} {
			for j, s := range steps {
				e := pp.Timing().StepTime(s).Seconds()/want[i*len(steps)+j] - 1
				sum += e * e
			}
		}
		return sum, nil
	}
	got, err := Fit(start, loss, FitOptions{Params: []string{"sampling_ns_per_logit"}, MaxEvals: 200, Tol: 1e-12})
	if err != nil {
		t.Fatal(err)
	}
	if first != GenericSamplingNsPerLogit {
		t.Errorf("the search started at %v ns, want the generic %v", first, GenericSamplingNsPerLogit)
	}
	if v := got.Coefficients.SamplingNsPerLogit; math.Abs(v/0.3-1) > 0.01 {
		t.Errorf("sampling_ns_per_logit = %v, want 0.3", v)
	}
	// Not named: not touched.
	other, err := Fit(start, loss, FitOptions{Params: []string{"seq_overhead_us"}, MaxEvals: 50})
	if err != nil {
		t.Fatal(err)
	}
	if other.Coefficients.SamplingNsPerLogit != 0 {
		t.Errorf("a fit that does not name it set sampling_ns_per_logit to %v", other.Coefficients.SamplingNsPerLogit)
	}
}

// rastrigin has a local minimum near every integer point, where a downhill
// simplex stalls: a test objective on which restarts can matter.
func rastrigin(x []float64) float64 {
	s := 10 * float64(len(x))
	for _, v := range x {
		s += v*v - 10*math.Cos(2*math.Pi*v)
	}
	return s
}

func TestRestartsNeverEndWorseAndStayDeterministic(t *testing.T) {
	funcs := map[string]objective{"rosenbrock": rosenbrock, "rastrigin": rastrigin}
	starts := [][]float64{{-1.2, 1}, {2.7, -3.1}, {0.4, 4.6}}
	improved := false
	for name, f := range funcs {
		for _, x0 := range starts {
			for _, budget := range []int{15, 40, 120} {
				_, plain, _ := nelderMead(f, x0, []float64{0.5, 0.5}, budget, 1e-9)
				x, got, evals, ran := restartedNelderMead(f, x0, []float64{0.5, 0.5}, budget, 1e-9, 4)
				if got > plain {
					t.Errorf("%s from %v, %d evaluations: %v with restarts, %v without", name, x0, budget, got, plain)
				}
				improved = improved || got < plain
				// A search may overrun its budget by a shrink of the simplex.
				if ran > 4 || evals > (budget+3)*(1+ran) {
					t.Errorf("%s: %d restarts, %d evaluations with a budget of %d per search", name, ran, evals, budget)
				}
				again, gotAgain, evalsAgain, ranAgain := restartedNelderMead(f, x0, []float64{0.5, 0.5}, budget, 1e-9, 4)
				if !slices.Equal(x, again) || got != gotAgain || evals != evalsAgain || ran != ranAgain {
					t.Fatalf("%s from %v: two runs disagree", name, x0)
				}
			}
		}
	}
	if !improved {
		t.Error("restarts never improved on a single search: the test does not exercise them")
	}
}

func TestRestartsStopAtTheFirstThatDoesNotImprove(t *testing.T) {
	bowl := func(x []float64) float64 { return x[0]*x[0] + x[1]*x[1] }
	// Converged to tolerance at the minimum, a restart finds nothing better.
	_, f, _, ran := restartedNelderMead(bowl, []float64{1, 1}, []float64{0.5, 0.5}, 5000, 1e-12, 10)
	if ran != 1 || f > 1e-10 {
		t.Fatalf("%d restarts after converging (f %v), want 1", ran, f)
	}
}

func TestFitRecordsRestarts(t *testing.T) {
	truth := testProfile()
	s := decode(1000, 2000, 3000)
	want := truth.Timing().StepTime(s).Seconds()
	loss := func(p Profile) (float64, error) {
		e := p.Timing().StepTime(s).Seconds()/want - 1
		return e * e, nil
	}
	start := truth
	start.Coefficients = DefaultCoefficients
	params := []string{"bandwidth_efficiency", "step_overhead_us"}
	plain, err := Fit(start, loss, FitOptions{Params: params, MaxEvals: 12})
	if err != nil {
		t.Fatal(err)
	}
	restarted, err := Fit(start, loss, FitOptions{Params: params, MaxEvals: 12, Restarts: 3})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Fit.Restarts != 0 || restarted.Fit.Restarts == 0 || restarted.Fit.Evaluations <= plain.Fit.Evaluations {
		t.Fatalf("fit records: without restarts %+v, with %+v", plain.Fit, restarted.Fit)
	}
	if restarted.Fit.Objective > plain.Fit.Objective {
		t.Fatalf("objective %v with restarts, %v without", restarted.Fit.Objective, plain.Fit.Objective)
	}
}

// TestEveryFitParameterNamesACoefficient: the default, the shipped and
// the optional parameter lists name only fields Fit can adjust, once each.
func TestEveryFitParameterNamesACoefficient(t *testing.T) {
	p := testProfile()
	seen := map[string]bool{}
	for _, name := range AllFitParams {
		if ptr, _ := field(&p, name); ptr == nil || seen[name] {
			t.Errorf("AllFitParams: %q is unknown or repeated", name)
		}
		seen[name] = true
	}
	for _, name := range append(slices.Clone(FitParams), DefaultFitParams...) {
		if !seen[name] {
			t.Errorf("%q is fitted by default but not in AllFitParams", name)
		}
	}
	if slices.Contains(FitParams, "kv_bandwidth_efficiency") || slices.Contains(FitParams, "allreduce_us") {
		t.Errorf("FitParams %v fit what the shipped procedure holds fixed", FitParams)
	}
}
