package workload

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// collect drains a Source, failing the test if it runs past limit (a generator that never ends).
func collect(t testing.TB, src Source, limit int) []Request {
	t.Helper()
	var out []Request
	for {
		r, ok := src.Next()
		if !ok {
			return out
		}
		out = append(out, r)
		require.LessOrEqual(t, len(out), limit, "source did not end")
	}
}

// requireOrdered checks the Source contract: non-decreasing arrivals and distinct, rising ids.
func requireOrdered(t *testing.T, reqs []Request) {
	t.Helper()
	for i := 1; i < len(reqs); i++ {
		require.LessOrEqual(t, reqs[i-1].Arrival, reqs[i].Arrival, "request %d arrives before %d", i, i-1)
		require.Greater(t, reqs[i].ID, reqs[i-1].ID)
	}
}

// generators builds every synthetic generator with a small config, keyed by name.
func generators() map[string]func(seed uint64) (Source, error) {
	return map[string]func(uint64) (Source, error){
		"poisson": func(seed uint64) (Source, error) {
			return NewPoisson(PoissonConfig{Rate: 50, Count: 300, Prompt: Range{10, 40}, Output: Range{1, 8}}, seed)
		},
		"bursty": func(seed uint64) (Source, error) {
			return NewBursty(BurstyConfig{Rate: 50, On: secs(1), Off: secs(2), Count: 300,
				Prompt: Fixed(16), Output: Fixed(4)}, seed)
		},
		"shared-prefix": func(seed uint64) (Source, error) {
			return NewSharedPrefix(SharedPrefixConfig{Groups: 3, UsersPerGroup: 4, SystemTokens: 32,
				QuestionTokens: 8, Output: Fixed(4), Rate: 20, Count: 300}, seed)
		},
		"sessions": func(seed uint64) (Source, error) {
			return NewSessions(SessionConfig{Sessions: 20, Turns: 5, Rate: 2,
				Think: DurationRange{secs(1), secs(10)}, Message: Range{4, 12}, Output: Range{1, 6}}, seed)
		},
	}
}
