package tune

import (
	"fmt"

	"switchyard/sim/stats"
)

// Known are points already simulated elsewhere, such as the cells of a tune sweep run on a
// cluster: a search given them reads their figures instead of simulating them again, and
// goes on from there exactly as if it had simulated them itself.
type Known struct {
	byKey map[string]stats.Summary
}

// Add records a point's summary. A point added twice must have one summary: two different
// runs of one point would make the search's result depend on which is read.
func (k *Known) Add(s Settings, sum stats.Summary) error {
	if k.byKey == nil {
		k.byKey = map[string]stats.Summary{}
	}
	c := s.canonical()
	if !c.valid() {
		return fmt.Errorf("tune: known point out of range: %+v", s)
	}
	if prev, ok := k.byKey[c.key()]; ok && !sameFigures(prev, sum) {
		return fmt.Errorf("tune: point %s is known twice, with different figures", c.key())
	}
	k.byKey[c.key()] = sum
	return nil
}

// Has says whether the point is known.
func (k *Known) Has(s Settings) bool {
	_, ok := k.byKey[s.canonical().key()]
	return ok
}

// Len is the number of known points.
func (k *Known) Len() int { return len(k.byKey) }

// Evaluate answers known points from their summaries and simulates the others with eval.
// It only reads k, so the search may call it from many goroutines.
func (k *Known) Evaluate(eval Evaluate) Evaluate {
	return func(s Settings) (stats.Summary, error) {
		if sum, ok := k.byKey[s.canonical().key()]; ok {
			return sum, nil
		}
		return eval(s)
	}
}

// sameFigures compares the figures a search reads.
func sameFigures(a, b stats.Summary) bool {
	return a.Requests == b.Requests && a.Completed == b.Completed && a.Failed == b.Failed && a.Good == b.Good &&
		a.TTFT == b.TTFT && a.ITL == b.ITL && a.E2E == b.E2E && a.GoodputRatio == b.GoodputRatio && a.HitRatio == b.HitRatio
}
