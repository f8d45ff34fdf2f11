package picker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/active"
	"switchyard/router/kv"
)

// trackedFixture is the load fixture with the named picker reading set.
func trackedFixture(t *testing.T, name string, o KVOptions, set *active.Set) *fixture {
	f := newFixture(t, aggregated(1), aggregated(2))
	p, err := New(name, Deps{Store: f.store, Tracker: kv.NewTracker(nil), KV: o, Active: set})
	require.NoError(t, err)
	f.picker = p.(*Scheduler)
	for _, w := range f.snap.Workers {
		f.sample(w, 0, wire.ActiveLoad{KVUsedBlocks: wire.U64(0), ActiveDecodeBlocks: wire.U64(0), ActivePrefillTokens: wire.U64(0)})
	}
	return f
}

// Worker 1 holds one active request the samples do not show. The
// per-request decode weight sends the next request to worker 2; without
// it the two tie and the cursor's first pick, worker 1, wins.
func TestDecodeActiveRequestWeightMovesThePick(t *testing.T) {
	for _, name := range []string{NameLoad, NameKV} {
		for _, weight := range []float64{0, 4} {
			set := active.New()
			require.True(t, set.Add(99, active.Hold{Rank: active.Rank{Namespace: "ns", WorkerID: 1}}))
			o := DefaultKVOptions()
			o.DecodeActiveRequestWeight = weight
			f := trackedFixture(t, name, o, set)
			sel, ok := f.pick(160)
			require.True(t, ok)
			want := uint64(1)
			if weight > 0 {
				want = 2
			}
			require.Equal(t, want, sel.Decode.WorkerID, "%s with weight %g", name, weight)
		}
	}
}

// Tracked prefill tokens replace a fresh sample's: worker 1's sample says
// idle, but the account holds a long prompt on it.
func TestTrackedPrefillTokensReplaceTheSample(t *testing.T) {
	for _, name := range []string{NameLoad, NameKV} {
		for _, track := range []bool{false, true} {
			set := active.New()
			require.True(t, set.Add(99, active.Hold{Rank: active.Rank{Namespace: "ns", WorkerID: 1}, PrefillTokens: 4000}))
			o := DefaultKVOptions()
			o.Track.PrefillTokens = track
			f := trackedFixture(t, name, o, set)
			sel, ok := f.pick(160)
			require.True(t, ok)
			want := uint64(1)
			if track {
				want = 2
			}
			require.Equal(t, want, sel.Decode.WorkerID, "%s tracking %v", name, track)
		}
	}
}
