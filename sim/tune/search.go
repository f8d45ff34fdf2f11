package tune

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"switchyard/sim/stats"
)

// Phases of the search, as search.json names them.
const (
	PhaseCurrent = "current"
	PhaseGrid    = "grid"
	PhaseRefine  = "refine"
)

// Budget bounds.
const (
	// MinBudget is the current settings and the coarse grid's
	// prefill_load_scale values.
	MinBudget = 8
	// MaxBudget caps the simulations one search may run.
	MaxBudget = 4096
	// DefaultBudget fits the two-knob grid and a few refinement rounds.
	DefaultBudget = 48
)

// margin is how much better, relative to the incumbent's figure, a point
// must be to replace it: moves smaller than this chase differences that a
// slightly different workload would not repeat.
const margin = 0.005

// minScaleStep is the smallest prefill_load_scale step of the refinement,
// in powers of two (2^(1/8): about 9 %); below it the search has
// converged.
const minScaleStep = 1.0 / 8

// Evaluate simulates the workload with the settings and summarises the
// run. The search calls it from up to Options.Parallel goroutines at once.
type Evaluate func(Settings) (stats.Summary, error)

// Options configure a search.
type Options struct {
	Objective Objective
	// Budget is the most simulations the search runs, the current
	// settings' included (MinBudget..MaxBudget; 0: DefaultBudget).
	Budget int
	// Current are the settings the workload runs with today: the first
	// point evaluated and the one gains are measured against.
	Current Settings
	// Parallel is how many evaluations run at once (at least 1). It
	// changes the wall time only, never the result.
	Parallel int
}

// Evaluation is one simulated point.
type Evaluation struct {
	Settings Settings `json:"settings"`
	Phase    string   `json:"phase"`
	// Round is the refinement round (0 for the current settings and the
	// grid).
	Round int `json:"round"`
	// Value is the objective's figure.
	Value   float64       `json:"value"`
	Summary stats.Summary `json:"-"`
}

// Result is a finished search.
type Result struct {
	Objective Objective
	// Evaluations are every simulated point in evaluation order.
	Evaluations []Evaluation
	// Current and Best index Evaluations: the current settings and the
	// recommendation (the same when nothing beat the current settings).
	Current, Best int
	// Converged is false when the budget ran out before the refinement
	// found no better neighbour at its finest step.
	Converged bool
}

// Gain is the recommendation's figure relative to the current settings':
// the fraction by which it is lower (lower-is-better objectives) or
// higher; 0 when the current figure is 0.
func (r *Result) Gain() float64 {
	cur, best := r.Evaluations[r.Current].Value, r.Evaluations[r.Best].Value
	if cur == 0 {
		return 0
	}
	if r.Objective.LowerIsBetter() {
		return (cur - best) / cur
	}
	return (best - cur) / cur
}

// Search runs the search (docs/tune.md): the current settings, a coarse
// grid over prefill_load_scale (and overlap_score_credit when the budget
// allows), then rounds of coordinate refinement around the best point so
// far, each round evaluating every neighbour at once, its steps halved
// when no neighbour is better, until the budget is spent or the steps are
// at their finest. Points are evaluated in batches; a batch's results are
// read in the batch's order, so the outcome does not depend on which
// evaluation finishes first.
func Search(o Options, eval Evaluate) (*Result, error) {
	if o.Budget == 0 {
		o.Budget = DefaultBudget
	}
	switch {
	case o.Budget < MinBudget || o.Budget > MaxBudget:
		return nil, fmt.Errorf("tune: budget must be in %d..%d, got %d", MinBudget, MaxBudget, o.Budget)
	case eval == nil:
		return nil, errors.New("tune: no evaluation function")
	}
	if _, err := ParseObjective(string(o.Objective)); err != nil {
		return nil, fmt.Errorf("tune: %w", err)
	}
	cur := o.Current.canonical()
	if !cur.valid() {
		return nil, fmt.Errorf("tune: current settings out of range: %+v", cur)
	}
	s := &searcher{opts: o, eval: eval, seen: map[string]int{}, res: &Result{Objective: o.Objective}}
	if err := s.run(PhaseCurrent, 0, []Settings{cur}); err != nil {
		return nil, err
	}
	if err := s.run(PhaseGrid, 0, gridOf(cur, o.Budget)); err != nil {
		return nil, err
	}
	s.res.Best = s.bestOf(0, len(s.res.Evaluations))
	scaleStep, creditStep := 0.5, 0.25
	for round := 1; ; round++ {
		if s.left() == 0 {
			return s.res, nil
		}
		inc := s.res.Evaluations[s.res.Best].Settings
		from := len(s.res.Evaluations)
		if err := s.run(PhaseRefine, round, neighbours(inc, scaleStep, creditStep)); err != nil {
			return nil, err
		}
		moved := false
		if len(s.res.Evaluations) > from {
			if b := s.bestOf(from, len(s.res.Evaluations)); s.better(b, s.res.Best) {
				s.res.Best, moved = b, true
			}
		}
		if !moved {
			if scaleStep/2 < minScaleStep {
				s.res.Converged = true
				return s.res, nil
			}
			scaleStep, creditStep = scaleStep/2, creditStep/2
		}
	}
}

type searcher struct {
	opts Options
	eval Evaluate
	seen map[string]int // canonical point → its evaluation
	res  *Result
}

func (s *searcher) left() int { return s.opts.Budget - len(s.res.Evaluations) }

// run evaluates the points not seen before, in order, as many as the
// budget has left, Parallel at a time, and appends them in that order.
func (s *searcher) run(phase string, round int, points []Settings) error {
	var batch []Settings
	for _, p := range points {
		p = p.canonical()
		if _, dup := s.seen[p.key()]; dup || !p.valid() || len(batch) == s.left() {
			continue
		}
		s.seen[p.key()] = -1
		batch = append(batch, p)
	}
	sums := make([]stats.Summary, len(batch))
	errs := make([]error, len(batch))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(max(s.opts.Parallel, 1), len(batch)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				sums[i], errs[i] = s.eval(batch[i])
			}
		}()
	}
	for i := range batch {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, p := range batch {
		if errs[i] != nil {
			return fmt.Errorf("tune: simulating %s: %w", p.key(), errs[i])
		}
		s.seen[p.key()] = len(s.res.Evaluations)
		s.res.Evaluations = append(s.res.Evaluations, Evaluation{Settings: p, Phase: phase, Round: round,
			Value: s.opts.Objective.Value(sums[i]), Summary: sums[i]})
	}
	return nil
}

// bestOf is the best evaluation of [from, to): the earliest of equals.
func (s *searcher) bestOf(from, to int) int {
	best := from
	for i := from + 1; i < to; i++ {
		if s.rank(i, best) < 0 {
			best = i
		}
	}
	return best
}

// rank orders two evaluations: negative when a is better than b, by any
// amount. Failing more requests than the current settings ranks a point
// below every one that does not (Objective.guardsFailures).
func (s *searcher) rank(a, b int) int {
	ea, eb := s.res.Evaluations[a], s.res.Evaluations[b]
	if s.opts.Objective.guardsFailures() {
		fa, fb := s.failsMore(ea), s.failsMore(eb)
		if fa != fb {
			if fa {
				return 1
			}
			return -1
		}
	}
	d := ea.Value - eb.Value
	if !s.opts.Objective.LowerIsBetter() {
		d = -d
	}
	switch {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}

// better reports whether a beats b by more than the margin.
func (s *searcher) better(a, b int) bool {
	if s.rank(a, b) >= 0 {
		return false
	}
	ea, eb := s.res.Evaluations[a], s.res.Evaluations[b]
	if s.opts.Objective.guardsFailures() && s.failsMore(eb) && !s.failsMore(ea) {
		return true
	}
	return math.Abs(ea.Value-eb.Value) > margin*math.Abs(eb.Value)
}

func (s *searcher) failsMore(e Evaluation) bool {
	return e.Summary.Failed > s.res.Evaluations[s.res.Current].Summary.Failed
}

// FullGridBudget is the least budget whose grid covers every overlap_score_credit of the
// coarse grid (the grid a tune sweep spreads over a cluster): the current settings, the grid
// and a refinement round's worth.
func FullGridBudget() int { return 1 + len(scaleGrid)*len(creditGrid) + 4 }

// gridOf is the coarse grid: every prefill_load_scale of scaleGrid, at
// each overlap_score_credit of creditGrid when the budget leaves room for
// refinement after it, else at the current credit; the other knobs as
// they are now.
func gridOf(cur Settings, budget int) []Settings {
	credits := []float64{cur.OverlapScoreCredit}
	if budget >= FullGridBudget() {
		credits = creditGrid
	}
	var out []Settings
	for _, c := range credits {
		for _, v := range scaleGrid {
			p := cur
			p.PrefillLoadScale, p.OverlapScoreCredit = v, c
			out = append(out, p)
		}
	}
	return out
}

// neighbours are the points one step from inc along each knob, in a fixed
// order: prefill_load_scale × and ÷ 2^scaleStep, overlap_score_credit ±
// creditStep, the temperature's and the decode weight's neighbouring
// ladder values, and each tracking switch flipped.
func neighbours(inc Settings, scaleStep, creditStep float64) []Settings {
	var out []Settings
	add := func(f func(*Settings)) {
		p := inc
		f(&p)
		out = append(out, p)
	}
	for _, dir := range []float64{1, -1} {
		v := math.Exp2(math.Log2(inc.PrefillLoadScale) + dir*scaleStep)
		if inc.PrefillLoadScale == 0 {
			v = MinPrefillLoadScale // a zero scale has no log: its one neighbour is the smallest scale
		}
		if v >= MinPrefillLoadScale && v <= MaxPrefillLoadScale {
			add(func(p *Settings) { p.PrefillLoadScale = v })
		}
	}
	for _, dir := range []float64{1, -1} {
		v := inc.OverlapScoreCredit + dir*creditStep
		if v >= 0 && v <= 1 {
			add(func(p *Settings) { p.OverlapScoreCredit = v })
		}
	}
	for _, v := range ladderNeighbours(temperatureLadder, inc.RouterTemperature) {
		add(func(p *Settings) { p.RouterTemperature = v })
	}
	for _, v := range ladderNeighbours(decodeWeightLadder, inc.DecodeActiveRequestWeight) {
		add(func(p *Settings) { p.DecodeActiveRequestWeight = v })
	}
	add(func(p *Settings) { p.TrackActiveBlocks = !p.TrackActiveBlocks })
	add(func(p *Settings) { p.TrackPrefillTokens = !p.TrackPrefillTokens })
	return out
}
