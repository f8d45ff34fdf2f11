package validate

import (
	"fmt"
	"math"
	"sync"

	"switchyard/fakefleet/engine/perf"
	"switchyard/internal/groundtruth"
)

// LossMetrics are the metrics the fitting loss weighs: the ones the
// calibration bars are set on.
var LossMetrics = []Metric{E2EMean, TTFTMean, TPOT}

// LossAPECap bounds one experiment's APE in the loss, so that an
// experiment the candidate drives into saturation (errors in the
// thousands of percent) cannot outweigh all the others.
const LossAPECap = 100

// Loss scores summary-level errors of a set of experiments: the mean over
// experiments of their mean APE over LossMetrics, plus the mean over those
// metrics of |MPE| (so a fit cannot buy a low MAPE with a bias). Each
// error is capped at ±LossAPECap first; metrics an experiment lacks are
// left out of its mean. Lower is better; 0 is a perfect prediction.
func Loss(errs []PE) float64 {
	apeSum, apeN := 0.0, 0
	signed := make([]float64, len(LossMetrics))
	counts := make([]int, len(LossMetrics))
	for _, pe := range errs {
		expSum, expN := 0.0, 0
		for i, m := range LossMetrics {
			v := pe[m]
			if math.IsNaN(v) {
				continue
			}
			v = max(-LossAPECap, min(LossAPECap, v))
			expSum += math.Abs(v)
			expN++
			signed[i] += v
			counts[i]++
		}
		if expN > 0 {
			apeSum += expSum / float64(expN)
			apeN++
		}
	}
	if apeN == 0 {
		return math.Inf(1)
	}
	bias, biasN := 0.0, 0
	for i := range LossMetrics {
		if counts[i] > 0 {
			bias += math.Abs(signed[i] / float64(counts[i]))
			biasN++
		}
	}
	return apeSum/float64(apeN) + bias/float64(biasN)
}

// FitCase is one experiment of a calibration: what is simulated (possibly
// Scaled) and its deployment, whose coefficients each evaluation replaces.
type FitCase struct {
	Exp        *groundtruth.Experiment
	Deployment perf.Profile
}

// Calibration evaluates candidate coefficients on a set of experiments.
// The same cases, seed and candidate always give the same errors, however
// many run at once.
type Calibration struct {
	Cases    []FitCase
	Seed     uint64
	Parallel int // experiments simulated at once; < 1 means 1
	// Progress, when set, is called with the number of requests that
	// ended, from several goroutines at once.
	Progress func(int)
}

// NewCalibration prepares exps for fitting: each one's deployment (with
// base's coefficients) and, for scale in (0, 1), its Scaled workload. An
// experiment that cannot be simulated is left out and listed in skipped
// with the reason, by id.
func NewCalibration(exps []*groundtruth.Experiment, base perf.Profile, scale float64) (*Calibration, map[string]string) {
	c := &Calibration{Seed: 1, Parallel: 1}
	skipped := map[string]string{}
	for _, exp := range exps {
		if err := Check(exp); err != nil {
			skipped[exp.ID] = err.Error()
			continue
		}
		d, err := Deployment(exp, base)
		if err == nil {
			_, err = ProfileSetup(exp, d)
		}
		if err != nil {
			skipped[exp.ID] = err.Error()
			continue
		}
		c.Cases = append(c.Cases, FitCase{Exp: Scaled(exp, scale), Deployment: d})
	}
	return c, skipped
}

// IDs lists the cases' experiment ids in order.
func (c *Calibration) IDs() []string {
	ids := make([]string, len(c.Cases))
	for i, fc := range c.Cases {
		ids[i] = fc.Exp.ID
	}
	return ids
}

// Requests is how many requests one evaluation simulates.
func (c *Calibration) Requests() int {
	n := 0
	for _, fc := range c.Cases {
		n += RequestCount(fc.Exp)
	}
	return n
}

// Errors simulates every case with cand's coefficients and client overhead
// and returns the summary-level errors, in case order.
func (c *Calibration) Errors(cand perf.Profile) ([]PE, error) {
	errs := make([]PE, len(c.Cases))
	fails := make([]error, len(c.Cases))
	sem := make(chan struct{}, max(c.Parallel, 1))
	var wg sync.WaitGroup
	for i, fc := range c.Cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i], fails[i] = c.evaluate(fc, cand)
		}()
	}
	wg.Wait()
	for i, err := range fails {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Cases[i].Exp.ID, err)
		}
	}
	return errs, nil
}

func (c *Calibration) evaluate(fc FitCase, cand perf.Profile) (PE, error) {
	d := fc.Deployment
	d.Coefficients, d.Overheads = cand.Coefficients, cand.Overheads
	setup, err := ProfileSetup(fc.Exp, d)
	if err != nil {
		return PE{}, err
	}
	pred, err := RunWithProgress(fc.Exp, setup, c.Seed, c.Progress)
	if err != nil {
		return PE{}, err
	}
	return Score(fc.Exp, pred).Summary, nil
}

// Loss is Loss of cand's errors on the cases.
func (c *Calibration) Loss(cand perf.Profile) (float64, error) {
	errs, err := c.Errors(cand)
	if err != nil {
		return 0, err
	}
	return Loss(errs), nil
}

// Fit fits start's coefficients (opts.Params, see perf.Fit) to minimise
// the cases' Loss; the result's FitRecord lists the cases' experiments.
// onEval, when set, is called after every evaluation with the loss.
func (c *Calibration) Fit(start perf.Profile, opts perf.FitOptions, onEval func(float64)) (perf.Profile, error) {
	if len(c.Cases) == 0 {
		return perf.Profile{}, fmt.Errorf("%w: no experiment to fit on", perf.ErrFit)
	}
	opts.Experiments = c.IDs()
	return perf.Fit(start, func(p perf.Profile) (float64, error) {
		v, err := c.Loss(p)
		if onEval != nil && err == nil {
			onEval(v)
		}
		return v, err
	}, opts)
}

// RequestCount is how many requests simulating exp submits.
func RequestCount(exp *groundtruth.Experiment) int {
	if exp.Workload.Kind == groundtruth.RequestTrace {
		return len(exp.Requests)
	}
	n := 0
	for _, s := range exp.Workload.Stages {
		n += s.NumRequests
	}
	return n
}
