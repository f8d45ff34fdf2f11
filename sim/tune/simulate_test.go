package tune

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/sim"
)

// sharedPrefix is a small shared-prefix workload where Dynamo's default
// prefill_load_scale of 1 is poor: sixteen 1,024-token prefixes over four
// workers that each hold an eighth of them, so a prefix's cached copy
// matters more than the load the default weighs it against.
func sharedPrefix(t *testing.T) *sim.Scenario {
	t.Helper()
	sc, err := sim.ParseScenario([]byte(`
seed: 3
fleet:
  - {role: aggregated, count: 4, block_size: 16, total_kv_blocks: 512}
workload:
  shared_prefix: {groups: 16, users_per_group: 4, system_tokens: 1024, question_tokens: 128, output: {min: 16, max: 48}, rate: 40, count: 300}
`))
	require.NoError(t, err)
	return sc
}

// On the simulator itself: the search beats the default by a wide margin
// with a larger prefill_load_scale, and gives the same evaluations with
// one core as with two.
func TestSearchBeatsTheDefaultOnASharedPrefixWorkload(t *testing.T) {
	w := Workload{Scenario: sharedPrefix(t)}
	opts := Options{Objective: TTFTP90, Budget: 10, Current: SettingsOf(w.Scenario.Router.KV), Parallel: 2}
	assert.Equal(t, defaults(), opts.Current)

	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	one, err := Search(Options{Objective: opts.Objective, Budget: opts.Budget, Current: opts.Current, Parallel: 1}, w.Evaluate())
	require.NoError(t, err)
	runtime.GOMAXPROCS(max(prev, 2))
	two, err := Search(opts, w.Evaluate())
	require.NoError(t, err)
	require.Equal(t, len(one.Evaluations), len(two.Evaluations))
	for i := range one.Evaluations {
		assert.Equal(t, one.Evaluations[i].Settings, two.Evaluations[i].Settings, i)
		assert.Equal(t, one.Evaluations[i].Summary, two.Evaluations[i].Summary, i)
	}
	assert.Equal(t, one.Best, two.Best)

	cur, best := two.Evaluations[two.Current], two.Evaluations[two.Best]
	assert.Greater(t, best.Settings.PrefillLoadScale, 1.0)
	assert.Less(t, best.Value, cur.Value/2, "TTFT p90 %.1f ms against %.1f ms today", best.Value, cur.Value)
	assert.Greater(t, best.Summary.HitRatio, cur.Summary.HitRatio)
	assert.Equal(t, 300, best.Summary.Completed)
}
