package tune

import (
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/sim/stats"
)

// bowl is a known landscape for the search's own logic: TTFT p90 lowest
// at prefill_load_scale 6, credit 0.75, temperature 0, decode weight 0.5
// with both tracking switches on.
func bowl(s Settings) (stats.Summary, error) {
	v := 100 + 40*math.Pow(math.Log2(s.PrefillLoadScale)-math.Log2(6), 2) + 30*math.Abs(s.OverlapScoreCredit-0.75) +
		200*s.RouterTemperature + 10*math.Abs(s.DecodeActiveRequestWeight-0.5)
	if !s.TrackActiveBlocks {
		v += 5
	}
	if !s.TrackPrefillTokens {
		v += 7
	}
	var sum stats.Summary
	sum.TTFT.P90 = v
	sum.HitRatio = 1 / v
	return sum, nil
}

func defaults() Settings { return Settings{PrefillLoadScale: 1, OverlapScoreCredit: 1} }

func TestSearchWalksToTheBottomOfAKnownLandscape(t *testing.T) {
	res, err := Search(Options{Objective: TTFTP90, Budget: 200, Current: defaults(), Parallel: 3}, bowl)
	require.NoError(t, err)
	best := res.Evaluations[res.Best].Settings
	assert.True(t, res.Converged)
	assert.InDelta(t, 6, best.PrefillLoadScale, 6*0.1)
	assert.InDelta(t, 0.75, best.OverlapScoreCredit, 0.07)
	assert.Equal(t, 0.0, best.RouterTemperature)
	assert.Equal(t, 0.5, best.DecodeActiveRequestWeight)
	assert.True(t, best.TrackActiveBlocks && best.TrackPrefillTokens)
	assert.Less(t, len(res.Evaluations), 200, "stops once converged")
	assert.Greater(t, res.Gain(), 0.5)

	// The order: the current settings, then the grid (without the current
	// point again), then refinement.
	assert.Equal(t, PhaseCurrent, res.Evaluations[0].Phase)
	assert.Equal(t, defaults(), res.Evaluations[0].Settings)
	i := 1
	for _, c := range creditGrid {
		for _, v := range scaleGrid {
			if v == 1 && c == 1 {
				continue
			}
			e := res.Evaluations[i]
			assert.Equal(t, PhaseGrid, e.Phase, i)
			assert.Equal(t, v, e.Settings.PrefillLoadScale, i)
			assert.Equal(t, c, e.Settings.OverlapScoreCredit, i)
			i++
		}
	}
	assert.Equal(t, PhaseRefine, res.Evaluations[i].Phase)
	assert.Equal(t, 1, res.Evaluations[i].Round)
	seen := map[string]bool{}
	for _, e := range res.Evaluations {
		assert.False(t, seen[e.Settings.key()], "evaluated twice: %s", e.Settings.key())
		seen[e.Settings.key()] = true
	}

	// Higher-is-better objectives walk the same way.
	hit, err := Search(Options{Objective: CacheHitRatio, Budget: 200, Current: defaults(), Parallel: 2}, bowl)
	require.NoError(t, err)
	assert.Equal(t, best, hit.Evaluations[hit.Best].Settings)
}

func TestSearchKeepsToTheBudget(t *testing.T) {
	var calls atomic.Int64
	count := func(s Settings) (stats.Summary, error) { calls.Add(1); return bowl(s) }
	res, err := Search(Options{Objective: TTFTP90, Budget: MinBudget, Current: defaults(), Parallel: 4}, count)
	require.NoError(t, err)
	assert.Len(t, res.Evaluations, MinBudget)
	assert.EqualValues(t, MinBudget, calls.Load())
	assert.False(t, res.Converged)
	// A small budget grids prefill_load_scale alone, at the current credit.
	for _, e := range res.Evaluations[1:] {
		assert.Equal(t, 1.0, e.Settings.OverlapScoreCredit)
	}
	assert.Equal(t, 8.0, res.Evaluations[res.Best].Settings.PrefillLoadScale)
}

// The outcome is the same however many evaluations run at once and
// however many cores there are.
func TestSearchDoesNotDependOnScheduling(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	one, err := Search(Options{Objective: TTFTP90, Budget: 60, Current: defaults(), Parallel: 1}, bowl)
	require.NoError(t, err)
	runtime.GOMAXPROCS(max(prev, 2))
	many, err := Search(Options{Objective: TTFTP90, Budget: 60, Current: defaults(), Parallel: 7}, bowl)
	require.NoError(t, err)
	assert.Equal(t, one, many)
}

// Latency percentiles leave failed requests out: a point that fails more
// requests than today's settings never wins on them.
func TestSearchRanksPointsThatFailMoreRequestsLast(t *testing.T) {
	failing := func(s Settings) (stats.Summary, error) {
		sum, _ := bowl(s)
		if s.PrefillLoadScale > 2 {
			sum.Failed = 3
		}
		return sum, nil
	}
	res, err := Search(Options{Objective: TTFTP90, Budget: 100, Current: defaults(), Parallel: 2}, failing)
	require.NoError(t, err)
	best := res.Evaluations[res.Best]
	assert.LessOrEqual(t, best.Settings.PrefillLoadScale, 2.0)
	assert.Zero(t, best.Summary.Failed)
	// Goodput counts failures itself: no guard.
	assert.False(t, Goodput.guardsFailures())
}

func TestSearchRefusesBadOptions(t *testing.T) {
	for _, c := range []struct {
		o    Options
		eval Evaluate
		want string
	}{
		{Options{Objective: TTFTP90, Budget: 3, Current: defaults()}, bowl, "budget must be in 8..4096, got 3"},
		{Options{Objective: TTFTP90, Budget: MaxBudget + 1, Current: defaults()}, bowl, "budget must be in"},
		{Options{Objective: "p99", Current: defaults()}, bowl, `unknown objective "p99" (known: ttft_p90, ttft_p50, e2e_p90, goodput, cache_hit_ratio)`},
		{Options{Objective: TTFTP90, Current: Settings{PrefillLoadScale: 1, OverlapScoreCredit: 2}}, bowl, "current settings out of range"},
		{Options{Objective: TTFTP90, Current: Settings{PrefillLoadScale: math.NaN()}}, bowl, "current settings out of range"},
		{Options{Objective: TTFTP90, Current: defaults()}, nil, "no evaluation function"},
	} {
		_, err := Search(c.o, c.eval)
		if assert.Error(t, err, c.want) {
			assert.Contains(t, err.Error(), c.want)
		}
	}
	// An evaluation's error names the point.
	_, err := Search(Options{Objective: TTFTP90, Current: defaults()}, func(s Settings) (stats.Summary, error) {
		if s.PrefillLoadScale == 4 {
			return stats.Summary{}, assert.AnError
		}
		return bowl(s)
	})
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "tune: simulating 4/1/0/0/false/false: "), err.Error())
}

func TestObjectives(t *testing.T) {
	var s stats.Summary
	s.TTFT.P50, s.TTFT.P90, s.E2E.P90, s.GoodputRatio, s.HitRatio = 1, 2, 3, 0.4, 0.5
	for o, want := range map[Objective]float64{TTFTP50: 1, TTFTP90: 2, E2EP90: 3, Goodput: 0.4, CacheHitRatio: 0.5} {
		assert.Equal(t, want, o.Value(s), o)
		p, err := ParseObjective(string(o))
		require.NoError(t, err)
		assert.Equal(t, o, p)
	}
	assert.True(t, TTFTP90.LowerIsBetter())
	assert.False(t, Goodput.LowerIsBetter())
	assert.True(t, Goodput.NeedsSLO())
	assert.False(t, E2EP90.NeedsSLO())
}

func TestNeighboursStayInTheSpace(t *testing.T) {
	for _, p := range neighbours(Settings{PrefillLoadScale: MaxPrefillLoadScale, OverlapScoreCredit: 1, RouterTemperature: 0.5,
		DecodeActiveRequestWeight: 4}, 0.5, 0.25) {
		assert.True(t, p.valid(), "%+v", p)
		assert.LessOrEqual(t, p.PrefillLoadScale, MaxPrefillLoadScale)
		assert.LessOrEqual(t, p.OverlapScoreCredit, 1.0)
	}
	// A zero scale steps to the smallest one.
	ns := neighbours(Settings{}, 0.5, 0.25)
	assert.Equal(t, MinPrefillLoadScale, ns[0].PrefillLoadScale)
	// An off-ladder value steps onto the ladder.
	assert.Equal(t, []float64{0.05}, ladderNeighbours(temperatureLadder, 0.06))
	assert.Equal(t, []float64{0, 0.02}, ladderNeighbours(temperatureLadder, 0.01))
}

// A search given some points as known reads them instead of evaluating them, and ends where
// the search that evaluated everything ends.
func TestKnownPointsAreReadNotEvaluated(t *testing.T) {
	var all []Settings
	full, err := Search(Options{Objective: TTFTP90, Budget: 30, Current: defaults(), Parallel: 2}, bowl)
	require.NoError(t, err)
	var known Known
	for _, e := range full.Evaluations {
		all = append(all, e.Settings)
		if e.Phase != PhaseRefine {
			require.NoError(t, known.Add(e.Settings, e.Summary))
		}
	}
	require.NoError(t, known.Add(full.Evaluations[0].Settings, full.Evaluations[0].Summary), "the same figures twice")
	other := full.Evaluations[0].Summary
	other.TTFT.P90++
	require.Error(t, known.Add(full.Evaluations[0].Settings, other))

	evaluated, reread := 0, 0
	var mu sync.Mutex
	cont, err := Search(Options{Objective: TTFTP90, Budget: 30, Current: defaults(), Parallel: 2}, known.Evaluate(func(s Settings) (stats.Summary, error) {
		mu.Lock()
		evaluated++
		if known.Has(s) {
			reread++
		}
		mu.Unlock()
		return bowl(s)
	}))
	require.NoError(t, err)
	assert.Equal(t, len(full.Evaluations)-known.Len(), evaluated)
	assert.Zero(t, reread, "a known point was simulated")
	assert.Equal(t, full.Best, cont.Best)
	for i, e := range cont.Evaluations {
		assert.Equal(t, all[i], e.Settings)
		assert.Equal(t, full.Evaluations[i].Value, e.Value)
	}
}
