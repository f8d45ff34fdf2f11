package perf

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// objective scores a point; lower is better. It must be deterministic for
// the fit to be.
type objective func(x []float64) float64

// nelderMead minimises f from x0 with the downhill simplex method, the
// first simplex spanning step along each axis. It stops after maxEvals
// evaluations or when the simplex's values agree within tol (relative).
// Ties are broken by vertex order, so the result depends only on f.
func nelderMead(f objective, x0, step []float64, maxEvals int, tol float64) (best []float64, fbest float64, evals int) {
	return downhill(f, x0, math.NaN(), step, maxEvals, tol)
}

// downhill is nelderMead with the value at x0 given as f0 when it is known
// (not NaN), which saves that evaluation.
func downhill(f objective, x0 []float64, f0 float64, step []float64, maxEvals int, tol float64) (best []float64, fbest float64, evals int) {
	n := len(x0)
	eval := func(x []float64) float64 {
		evals++
		v := f(x)
		if math.IsNaN(v) {
			return math.Inf(1)
		}
		return v
	}
	type vertex struct {
		x []float64
		f float64
	}
	simplex := make([]vertex, n+1)
	if math.IsNaN(f0) {
		f0 = eval(x0)
	}
	simplex[0] = vertex{slices.Clone(x0), f0}
	for i := range n {
		x := slices.Clone(x0)
		x[i] += step[i]
		simplex[i+1] = vertex{x, eval(x)}
	}
	// along returns c + t·(x − c).
	along := func(c, x []float64, t float64) []float64 {
		y := make([]float64, n)
		for i := range y {
			y[i] = c[i] + t*(x[i]-c[i])
		}
		return y
	}
	for evals < maxEvals {
		slices.SortStableFunc(simplex, func(a, b vertex) int { return cmpFloat(a.f, b.f) })
		lo, hi := simplex[0].f, simplex[n].f
		if hi-lo <= tol*(math.Abs(lo)+math.Abs(hi))/2+1e-300 {
			break
		}
		centroid := make([]float64, n)
		for _, v := range simplex[:n] {
			for i := range centroid {
				centroid[i] += v.x[i] / float64(n)
			}
		}
		worst := simplex[n]
		r := along(centroid, worst.x, -1)
		fr := eval(r)
		switch {
		case fr < simplex[0].f:
			// Better than every vertex: try going twice as far.
			e := along(centroid, worst.x, -2)
			if fe := eval(e); fe < fr {
				simplex[n] = vertex{e, fe}
			} else {
				simplex[n] = vertex{r, fr}
			}
		case fr < simplex[n-1].f:
			simplex[n] = vertex{r, fr}
		default:
			// Contract toward the better of the worst point and its reflection.
			c := along(centroid, worst.x, 0.5)
			if fr < worst.f {
				c = along(centroid, worst.x, -0.5)
			}
			if fc := eval(c); fc < min(fr, worst.f) {
				simplex[n] = vertex{c, fc}
				continue
			}
			for i := 1; i <= n; i++ {
				x := along(simplex[0].x, simplex[i].x, 0.5)
				simplex[i] = vertex{x, eval(x)}
			}
		}
	}
	slices.SortStableFunc(simplex, func(a, b vertex) int { return cmpFloat(a.f, b.f) })
	return simplex[0].x, simplex[0].f, evals
}

// restartedNelderMead runs nelderMead from x0 and then up to restarts more
// searches, each from a fresh simplex of the first one's size around the
// best point so far. A downhill simplex in several dimensions collapses
// onto a subspace and stalls there; a new simplex spans every axis again.
// The restarts stop early once one does not improve the best value by
// more than tol (relative). Each search has a budget of maxEvals; the
// best point is kept, so restarts never end worse than the first search.
func restartedNelderMead(f objective, x0, step []float64, maxEvals int, tol float64, restarts int) (best []float64, fbest float64, evals, ran int) {
	best, fbest, evals = nelderMead(f, x0, step, maxEvals, tol)
	for ran < restarts {
		x, fx, n := downhill(f, best, fbest, step, maxEvals, tol)
		evals += n
		ran++
		if !(fx < fbest) {
			break
		}
		gain := fbest - fx
		best, fbest = x, fx
		if gain <= tol*math.Abs(fbest) {
			break
		}
	}
	return best, fbest, evals, ran
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// FitParams is what `engine fit` adjusts unless told otherwise: the
// coefficients the shipped profiles were fitted on, and the procedure the
// leave-one-deployment-out validation checks (docs/engine-model.md). The
// KV share is not among them: only a model without grouped-query
// attention constrains it, so it stays at the generic value (the attention
// kernels stream the KV cache near the device's achievable bandwidth).
var FitParams = []string{"matmul_efficiency", "attention_efficiency", "bandwidth_efficiency",
	"step_overhead_us", "seq_overhead_us", "allreduce_doubling_us", "request_ms", "pcie_hop_us", "sampling_ns_per_logit"}

// AllFitParams names every parameter Fit can adjust: FitParams and the
// alternatives earlier profiles were fitted with.
var AllFitParams = append(slices.Clone(FitParams), "kv_bandwidth_efficiency", "allreduce_us", "allreduce_step_us", "pcie_collective_us")

// DefaultFitParams are the parameters Fit adjusts when FitOptions name
// none: those that experiments of one deployment constrain. The all-reduce
// latencies need more than one TP size (at one they are a fixed cost per
// step, indistinguishable from step_overhead_us), the PCIe hop PCIe-linked
// GPUs, and the sampler more than one vocabulary size.
var DefaultFitParams = []string{"matmul_efficiency", "attention_efficiency", "bandwidth_efficiency",
	"step_overhead_us", "seq_overhead_us", "request_ms"}

// genericStarts are where a fit starts the parameters that 0 turns off.
var genericStarts = map[string]float64{
	"pcie_collective_us":    GenericPCIeCollectiveUs,
	"pcie_hop_us":           DefaultCoefficients.PCIeHopUs,
	"allreduce_doubling_us": DefaultCoefficients.AllReduceDoublingUs,
	"sampling_ns_per_logit": GenericSamplingNsPerLogit,
}

// field returns the address of the named parameter in p and whether it is
// an efficiency (a share in (0, 1)) rather than a time (≥ 0).
func field(p *Profile, name string) (*float64, bool) {
	c := &p.Coefficients
	switch name {
	case "matmul_efficiency":
		return &c.MatmulEfficiency, true
	case "attention_efficiency":
		return &c.AttentionEfficiency, true
	case "bandwidth_efficiency":
		return &c.BandwidthEfficiency, true
	case "kv_bandwidth_efficiency":
		return &c.KVBandwidthEfficiency, true
	case "step_overhead_us":
		return &c.StepOverheadUs, false
	case "seq_overhead_us":
		return &c.SeqOverheadUs, false
	case "allreduce_us":
		return &c.AllReduceUs, false
	case "allreduce_step_us":
		return &c.AllReduceStepUs, false
	case "allreduce_doubling_us":
		return &c.AllReduceDoublingUs, false
	case "pcie_collective_us":
		return &c.PCIeCollectiveUs, false
	case "pcie_hop_us":
		return &c.PCIeHopUs, false
	case "sampling_ns_per_logit":
		return &c.SamplingNsPerLogit, false
	case "request_ms":
		return &p.Overheads.RequestMs, false
	}
	return nil, false
}

// FitOptions steer Fit. Zero values take the defaults noted.
type FitOptions struct {
	Params   []string // parameters to adjust, from FitParams; nil = DefaultFitParams
	MaxEvals int      // loss evaluations per search; 0 = 400
	// Restarts is how many more searches may follow the first, each from
	// a fresh simplex around the best point (see restartedNelderMead);
	// they end early at the first that does not improve. The evaluations
	// in all are about MaxEvals·(1 + Restarts) at most (a search may end
	// with a shrink of its simplex past its budget).
	Restarts int
	Tol      float64 // relative spread of the simplex to stop at; 0 = 1e-6
	// Experiments are recorded in the result's FitRecord.
	Experiments []string
}

// ErrFit is wrapped by Fit's errors.
var ErrFit = errors.New("perf: fit")

// Fit adjusts start's parameters to minimise loss, deterministically (the
// same start, loss and options give the same profile). It searches in a
// space where every value stays valid: efficiencies through a logistic
// map onto (0, 1), times through t = e^u − 1, so no bounds are needed.
// A loss error ends the fit.
func Fit(start Profile, loss func(Profile) (float64, error), opts FitOptions) (Profile, error) {
	params := opts.Params
	if params == nil {
		params = DefaultFitParams
	}
	if opts.MaxEvals <= 0 {
		opts.MaxEvals = 400
	}
	if opts.Tol <= 0 {
		opts.Tol = 1e-6
	}
	// An unset KV efficiency means the weights' one: start the search
	// there rather than at the edge of (0, 1).
	start.Coefficients.KVBandwidthEfficiency = start.Coefficients.kvBandwidthEfficiency()
	// A latency a profile leaves unset is off; fitting it from zero would
	// take the search's first steps below a microsecond (or a nanosecond),
	// so it starts from its generic value.
	for _, name := range params {
		if v, ok := genericStarts[name]; ok {
			if ptr, _ := field(&start, name); *ptr == 0 {
				*ptr = v
			}
		}
	}
	x0 := make([]float64, len(params))
	step := make([]float64, len(params))
	for i, name := range params {
		ptr, share := field(&start, name)
		if ptr == nil {
			return Profile{}, fmt.Errorf("%w: unknown parameter %q (one of %v)", ErrFit, name, AllFitParams)
		}
		x0[i], step[i] = toSearch(*ptr, share), 0.5
	}
	var lossErr error
	set := func(x []float64) Profile {
		p := start
		for i, name := range params {
			ptr, share := field(&p, name)
			*ptr = fromSearch(x[i], share)
		}
		return p
	}
	f := func(x []float64) float64 {
		if lossErr != nil {
			return math.Inf(1)
		}
		v, err := loss(set(x))
		if err != nil {
			lossErr = err
			return math.Inf(1)
		}
		return v
	}
	x, fbest, evals, ran := restartedNelderMead(f, x0, step, opts.MaxEvals, opts.Tol, max(opts.Restarts, 0))
	if lossErr != nil {
		return Profile{}, fmt.Errorf("%w: %w", ErrFit, lossErr)
	}
	p := set(x)
	method := fmt.Sprintf("Nelder-Mead over %v", params)
	if opts.Restarts > 0 {
		method += fmt.Sprintf(", up to %d evaluations per search, up to %d restarts", opts.MaxEvals, opts.Restarts)
	}
	p.Fit = &FitRecord{Method: method, Experiments: opts.Experiments,
		Objective: fbest, Evaluations: evals, Restarts: ran}
	return p, p.Validate()
}

func toSearch(v float64, share bool) float64 {
	if share {
		v = min(max(v, 1e-6), 1-1e-6)
		return math.Log(v / (1 - v))
	}
	return math.Log1p(max(v, 0))
}

func fromSearch(u float64, share bool) float64 {
	if share {
		return 1 / (1 + math.Exp(-u))
	}
	return math.Expm1(min(u, 40))
}
