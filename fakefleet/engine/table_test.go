package engine_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/engine"
)

var _ engine.Timing = engine.Table{}

func mustTable(t *testing.T) engine.Table {
	t.Helper()
	tb, err := engine.NewTable(
		[]engine.Point{{X: 100, Ms: 20}, {X: 1000, Ms: 38}, {X: 2000, Ms: 78}},
		[]engine.Point{{X: 0, Ms: 6}, {X: 0.5, Ms: 20}, {X: 1, Ms: 34}},
	)
	require.NoError(t, err)
	return tb
}

func TestTableExactPointsAndInterpolation(t *testing.T) {
	tb := mustTable(t)
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

	require.Equal(t, ms(20), tb.PrefillTime(100))
	require.Equal(t, ms(38), tb.PrefillTime(1000))
	require.Equal(t, ms(78), tb.PrefillTime(2000))
	require.Equal(t, ms(29), tb.PrefillTime(550), "halfway between 100 and 1000")
	require.Equal(t, ms(58), tb.PrefillTime(1500))

	require.Equal(t, ms(6), tb.DecodeStepTime(0))
	require.Equal(t, ms(20), tb.DecodeStepTime(0.5))
	require.Equal(t, ms(34), tb.DecodeStepTime(1))
	require.Equal(t, ms(27), tb.DecodeStepTime(0.75))
}

func TestTableClampAndExtrapolate(t *testing.T) {
	tb := mustTable(t)
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

	require.Zero(t, tb.PrefillTime(0), "nothing to prefill costs nothing")
	require.Zero(t, tb.PrefillTime(-3))
	require.Equal(t, ms(20), tb.PrefillTime(1), "below the first point: its cost")
	require.Equal(t, ms(118), tb.PrefillTime(3000), "beyond the last: last segment's slope (40ms/1000)")

	require.Equal(t, ms(6), tb.DecodeStepTime(-0.1))
	require.Equal(t, ms(34), tb.DecodeStepTime(1.5), "decode clamps rather than extrapolates")

	// A single point is flat everywhere; a falling last segment cannot go
	// negative; decode is floored at 1 ms.
	one, err := engine.NewTable([]engine.Point{{X: 10, Ms: 5}}, []engine.Point{{X: 0.5, Ms: 0.2}})
	require.NoError(t, err)
	require.Equal(t, ms(5), one.PrefillTime(1_000_000))
	require.Equal(t, ms(1), one.DecodeStepTime(0.5))
	fall, err := engine.NewTable([]engine.Point{{X: 0, Ms: 10}, {X: 10, Ms: 5}}, []engine.Point{{X: 0, Ms: 2}})
	require.NoError(t, err)
	require.Zero(t, fall.PrefillTime(100))

	// The zero Table is usable: no prefill cost, the decode floor.
	require.Zero(t, engine.Table{}.PrefillTime(10))
	require.Equal(t, ms(1), engine.Table{}.DecodeStepTime(0.3))
}

func TestNewTableValidation(t *testing.T) {
	ok := []engine.Point{{X: 0, Ms: 1}, {X: 1, Ms: 2}}
	for name, bad := range map[string][]engine.Point{
		"empty":      nil,
		"unsorted":   {{X: 2, Ms: 1}, {X: 1, Ms: 2}},
		"repeated X": {{X: 1, Ms: 1}, {X: 1, Ms: 2}},
		"negative":   {{X: 0, Ms: -1}},
		"NaN":        {{X: math.NaN(), Ms: 1}},
		"Inf":        {{X: 0, Ms: math.Inf(1)}},
	} {
		_, err := engine.NewTable(bad, ok)
		require.ErrorIs(t, err, engine.ErrBadTable, "prefill %s", name)
		_, err = engine.NewTable(ok, bad)
		require.ErrorIs(t, err, engine.ErrBadTable, "decode %s", name)
	}

	// The table keeps its own copy.
	pts := []engine.Point{{X: 0, Ms: 1}, {X: 10, Ms: 11}}
	tb, err := engine.NewTable(pts, ok)
	require.NoError(t, err)
	pts[1] = engine.Point{X: -5, Ms: 0}
	require.Equal(t, 6*time.Millisecond, tb.PrefillTime(5))
}

// TestTableDrivesEngine checks a Table prices real engine steps.
func TestTableDrivesEngine(t *testing.T) {
	tb, err := engine.NewTable([]engine.Point{{X: 0, Ms: 10}, {X: 100, Ms: 30}}, []engine.Point{{X: 0, Ms: 4}})
	require.NoError(t, err)
	e := engine.New(engine.Config{BlockSize: 4, TotalKVBlocks: 64, Timing: tb})
	now := time.Unix(0, 0)
	e.Submit(engine.Request{ID: 1, Tokens: make([]uint32, 50), MaxTokens: 2, Arrival: now}, now)
	e.Advance(now)
	at, busy := e.NextEvent()
	require.True(t, busy)
	require.Equal(t, 20*time.Millisecond, at.Sub(now), "50 new tokens: halfway from 10 to 30 ms")
}
