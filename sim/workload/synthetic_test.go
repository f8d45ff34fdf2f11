package workload

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func TestDeterminismAndOrdering(t *testing.T) {
	for name, mk := range generators() {
		t.Run(name, func(t *testing.T) {
			a, err := mk(7)
			require.NoError(t, err)
			b, err := mk(7)
			require.NoError(t, err)
			c, err := mk(8)
			require.NoError(t, err)
			ra, rb, rc := collect(t, a, 10000), collect(t, b, 10000), collect(t, c, 10000)
			require.NotEmpty(t, ra)
			require.Equal(t, ra, rb, "same seed must give the same stream")
			require.NotEqual(t, ra, rc, "different seeds must differ")
			requireOrdered(t, ra)
			_, ok := a.Next()
			require.False(t, ok, "an exhausted source stays exhausted")
		})
	}
}

// meanAndCV returns the mean inter-arrival gap in seconds and its coefficient of variation, which
// is 1 for an exponential distribution.
func meanAndCV(reqs []Request) (mean, cv float64) {
	var sum, sq float64
	prev := time.Duration(0)
	for _, r := range reqs {
		g := (r.Arrival - prev).Seconds()
		prev = r.Arrival
		sum += g
		sq += g * g
	}
	n := float64(len(reqs))
	mean = sum / n
	return mean, math.Sqrt(sq/n-mean*mean) / mean
}

func TestPoissonRateAndLengths(t *testing.T) {
	const rate, count = 200.0, 40000
	src, err := NewPoisson(PoissonConfig{Rate: rate, Count: count, Prompt: Range{100, 300}, Output: Fixed(7)}, 1)
	require.NoError(t, err)
	reqs := collect(t, src, count)
	require.Len(t, reqs, count)
	mean, cv := meanAndCV(reqs)
	// With 40,000 samples the standard error of the mean gap is 0.5%; 3% is about six sigma.
	require.InDelta(t, 1/rate, mean, 0.03/rate)
	require.InDelta(t, 1, cv, 0.03)
	var total int
	for _, r := range reqs {
		require.GreaterOrEqual(t, len(r.Tokens), 100)
		require.LessOrEqual(t, len(r.Tokens), 300)
		require.Equal(t, 7, r.MaxTokens)
		require.Zero(t, r.Session)
		require.Less(t, slices.Max(r.Tokens), uint32(VocabSize))
		total += len(r.Tokens)
	}
	require.InDelta(t, 200, float64(total)/count, 2)
}

func TestBurstyOnlyArrivesWhileOn(t *testing.T) {
	const on, off, rate, count = 2 * time.Second, 6 * time.Second, 100.0, 40000
	src, err := NewBursty(BurstyConfig{Rate: rate, On: on, Off: off, Count: count, Prompt: Fixed(1), Output: Fixed(1)}, 3)
	require.NoError(t, err)
	reqs := collect(t, src, count)
	require.Len(t, reqs, count)
	for _, r := range reqs {
		require.Less(t, r.Arrival%(on+off), on, "arrival %v falls in an off period", r.Arrival)
	}
	// Long-run rate is Rate * on/(on+off) = 25/s.
	got := count / reqs[count-1].Arrival.Seconds()
	require.InDelta(t, 25, got, 25*0.03)
}

func TestConfigValidation(t *testing.T) {
	_, err := NewPoisson(PoissonConfig{Rate: math.NaN(), Count: 0, Prompt: Range{5, 2}, Output: Fixed(1)}, 0)
	require.ErrorContains(t, err, "workload poisson: invalid config")
	require.ErrorContains(t, err, "Rate must be a finite rate > 0")
	require.ErrorContains(t, err, "Count must be >= 1, got 0")
	require.ErrorContains(t, err, "Prompt.Max (2) must be >= Prompt.Min (5)")

	_, err = NewBursty(BurstyConfig{Rate: 1, On: 0, Off: -1, Count: 1, Prompt: Fixed(1), Output: Fixed(MaxPromptTokens + 1)}, 0)
	require.ErrorContains(t, err, "On must be > 0")
	require.ErrorContains(t, err, "Off must be >= 0")
	require.ErrorContains(t, err, "Output.Max must be <=")

	_, err = NewSharedPrefix(SharedPrefixConfig{Groups: 1 << 20, UsersPerGroup: 1, SystemTokens: 1 << 10,
		QuestionTokens: 1, Output: Fixed(1), Rate: 1, Count: 1}, 0)
	require.ErrorContains(t, err, "Groups*SystemTokens")

	_, err = NewSessions(SessionConfig{Sessions: 1, Turns: 1000, Rate: 1, Think: DurationRange{-1, 0},
		Message: Fixed(4000), Output: Fixed(1)}, 0)
	require.ErrorContains(t, err, "Think.Min must be >= 0")
	require.ErrorContains(t, err, "Turns*Message.Max")

	_, err = NewTrace(nil, TraceConfig{Speedup: -2, MaxLineBytes: -1})
	require.ErrorContains(t, err, "Speedup must be")
	require.ErrorContains(t, err, "MaxLineBytes must be >= 0")
}
