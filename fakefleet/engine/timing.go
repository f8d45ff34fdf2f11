package engine

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Timing prices one engine step from what the step computes. The engine
// divides the result by Config.SpeedupRatio.
type Timing interface {
	// StepTime is the duration of step s. s and its slices are only valid
	// during the call: the engine reuses them for the next step.
	StepTime(s Step) time.Duration
}

// Step is the shape of one scheduler step: the prompt (or recompute)
// chunks it prefills and the sequences it decodes one token for.
type Step struct {
	// Prefill lists one chunk per sequence that computes prompt tokens.
	Prefill []Chunk
	// Decode holds, per decoding sequence, its context: the tokens
	// already in its KV cache that the new token attends to.
	Decode []int
	// PrefillTokens is the sum of Prefill's NewTokens and DecodeContext
	// the sum of Decode, so models pricing totals need not loop.
	PrefillTokens, DecodeContext int
	// KVFraction is the referenced share of the rank's KV blocks, 0..1,
	// after the step's blocks are reserved: the mocker prices decode by it.
	KVFraction float64
}

// Chunk is one sequence's prefill work in a step: NewTokens computed on
// top of Context tokens whose KV is already there (prefix-cache hits and
// earlier chunks), which the new tokens attend to.
type Chunk struct{ NewTokens, Context int }

// PhaseTiming is the older two-part pricing: a prefill cost from the new
// prompt tokens of the step and a decode cost from the KV fraction. Split
// adapts it to Timing; Mocker, Constant and Table are PhaseTimings.
type PhaseTiming interface {
	// PrefillTime is the cost of computing newTokens uncached prompt tokens.
	PrefillTime(newTokens int) time.Duration
	// DecodeStepTime is the cost of one decode step for the whole batch
	// when activeKVFraction of the KV cache is referenced.
	DecodeStepTime(activeKVFraction float64) time.Duration
}

// Split prices a step as the sum of its prefill part (all new prompt
// tokens together) and, when anything decodes, its decode part.
func Split(p PhaseTiming, s Step) time.Duration {
	d := p.PrefillTime(s.PrefillTokens)
	if len(s.Decode) > 0 {
		d += p.DecodeStepTime(s.KVFraction)
	}
	return d
}

// Mocker is Dynamo's mocker polynomial model (dynamo-wire.md §9.1), so the
// fake fleet's latencies have the same shape as the reference mocker's.
type Mocker struct{}

// PrefillTime is 4.209989e-07·N² + 1.518344e-02·N + 16.50142 ms, 0 for N = 0.
func (Mocker) PrefillTime(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	x := float64(n)
	return ms(4.209989e-07*x*x + 1.518344e-02*x + 1.650142e+01)
}

// DecodeStepTime is −25.74·p² + 54.01·p + 5.74 ms, floored at 1 ms.
func (Mocker) DecodeStepTime(p float64) time.Duration {
	return ms(max(1.0, -25.74*p*p+54.01*p+5.74))
}

// StepTime is Split(Mocker{}, s).
func (m Mocker) StepTime(s Step) time.Duration { return Split(m, s) }

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// Constant charges fixed costs, which makes step boundaries easy to predict
// in tests: Prefill for any step with new prompt tokens, Step per decode.
type Constant struct{ Prefill, Step time.Duration }

// PrefillTime returns Prefill when there is anything to prefill.
func (c Constant) PrefillTime(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return c.Prefill
}

// DecodeStepTime returns Step.
func (c Constant) DecodeStepTime(float64) time.Duration { return c.Step }

// StepTime is Split(c, s).
func (c Constant) StepTime(s Step) time.Duration { return Split(c, s) }

// Point is one measured cost: Ms milliseconds at X (new prompt tokens for
// prefill, referenced KV fraction for decode).
type Point struct{ X, Ms float64 }

// Table prices steps by linear interpolation between measured points, so
// a profile of a real engine (like the mocker's interpolated NPZ model)
// can replace the polynomials. Build it with NewTable, which checks the
// invariants the lookups rely on; a zero Table prices prefill at 0 and
// decode at the 1 ms floor.
type Table struct {
	Prefill []Point // X = new (uncached) tokens in the step
	Decode  []Point // X = referenced fraction of the KV cache, 0..1
}

// ErrBadTable is wrapped by NewTable's errors.
var ErrBadTable = errors.New("engine: invalid timing table")

// NewTable validates both curves: non-empty, finite, non-negative costs,
// and X strictly increasing (a repeated X would make the cost there
// ambiguous). The slices are copied so later edits by the caller cannot
// unsort them.
func NewTable(prefill, decode []Point) (Table, error) {
	if err := checkPoints("prefill", prefill); err != nil {
		return Table{}, err
	}
	if err := checkPoints("decode", decode); err != nil {
		return Table{}, err
	}
	return Table{Prefill: slices.Clone(prefill), Decode: slices.Clone(decode)}, nil
}

func checkPoints(name string, ps []Point) error {
	if len(ps) == 0 {
		return fmt.Errorf("%w: %s has no points", ErrBadTable, name)
	}
	for i, p := range ps {
		if math.IsNaN(p.X) || math.IsInf(p.X, 0) || math.IsNaN(p.Ms) || math.IsInf(p.Ms, 0) || p.Ms < 0 {
			return fmt.Errorf("%w: %s point %d (%v, %v ms) is not a finite non-negative cost", ErrBadTable, name, i, p.X, p.Ms)
		}
		if i > 0 && p.X <= ps[i-1].X {
			return fmt.Errorf("%w: %s X not strictly increasing at point %d", ErrBadTable, name, i)
		}
	}
	return nil
}

// PrefillTime interpolates the prefill curve at n new tokens; 0 for none,
// as in the mocker. Below the first point it is the first cost; beyond the
// last it follows the last segment's slope, since prefill keeps growing
// with prompt length past the largest size profiled.
func (t Table) PrefillTime(n int) time.Duration {
	if n <= 0 || len(t.Prefill) == 0 {
		return 0
	}
	return ms(max(0, interpolate(t.Prefill, float64(n), true)))
}

// DecodeStepTime interpolates the decode curve at KV fraction p, clamped
// to the end points (the fraction cannot exceed the cache), and floored at
// 1 ms like the mocker so a step never takes no time.
func (t Table) DecodeStepTime(p float64) time.Duration {
	if len(t.Decode) == 0 {
		return ms(1)
	}
	return ms(max(1, interpolate(t.Decode, p, false)))
}

// StepTime is Split(t, s).
func (t Table) StepTime(s Step) time.Duration { return Split(t, s) }

// interpolate reads ps at x. ps is sorted and non-empty. Before the first
// point the first cost holds; after the last, extrapolate continues the
// last segment, otherwise the last cost holds.
func interpolate(ps []Point, x float64, extrapolate bool) float64 {
	if x <= ps[0].X {
		return ps[0].Ms
	}
	// i is the first point at or beyond x; i >= 1 because x > ps[0].X.
	i, _ := slices.BinarySearchFunc(ps, x, func(p Point, x float64) int { return cmp.Compare(p.X, x) })
	if i == len(ps) {
		if !extrapolate || len(ps) == 1 {
			return ps[len(ps)-1].Ms
		}
		i = len(ps) - 1
	}
	a, b := ps[i-1], ps[i]
	return a.Ms + (b.Ms-a.Ms)*(x-a.X)/(b.X-a.X)
}
