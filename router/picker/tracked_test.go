package picker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/active"
	"switchyard/router/discovery"
	"switchyard/router/events"
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

// Overlap credit decay: worker 1 holds the prompt's first 8 of 10 blocks
// but the account holds a long prompt still prefilling on it. Undecayed,
// its credit outweighs that backlog (cost 19 against the idle worker 2's
// 20); with decay 1 the backlog of one and a half requests leaves it 40 %
// of the credit (cost 23.8), and worker 2 wins.
// Without prefill tracking there is nothing to decay against.
func TestOverlapCreditDecaysWithTrackedPrefillLoad(t *testing.T) {
	cases := []struct {
		decay float64
		track bool
		want  uint64
	}{{0, true, 1}, {1, true, 2}, {1, false, 1}}
	for _, tc := range cases {
		set := active.New()
		require.True(t, set.Add(99, active.Hold{Rank: active.Rank{Namespace: "ns", WorkerID: 1}, PrefillTokens: 240}))
		o := DefaultKVOptions()
		o.OverlapScoreCreditDecay, o.Track.PrefillTokens = tc.decay, tc.track
		f := newFixture(t, aggregated(1), aggregated(2))
		tr := kv.NewTracker(nil)
		tr.SetLive(f.snap)
		p, err := New(NameKV, Deps{Store: f.store, Tracker: tr, KV: o, Active: set})
		require.NoError(t, err)
		f.picker = p.(*Scheduler)
		for _, w := range f.snap.Workers {
			f.sample(w, 0, wire.ActiveLoad{KVUsedBlocks: wire.U64(0), ActiveDecodeBlocks: wire.U64(0), ActivePrefillTokens: wire.U64(0)})
		}
		cacheOn(t, tr, f.snap.Workers[0], tokens(0, 128))
		f.nextID++
		sel, ok := f.dispatch(Request{ID: f.nextID, Model: "m", Namespaces: []string{"ns"}, PromptTokens: 160,
			Tokens: tokens(0, 160), Now: f.clk.Now()})
		require.True(t, ok)
		require.Equal(t, tc.want, sel.Decode.WorkerID, "decay %g, tracking prefill %v", tc.decay, tc.track)
	}
}

// creditDecay halves the credit at one request's worth of excess backlog.
func TestCreditDecayHalvesAtOneRequest(t *testing.T) {
	require.InDelta(t, 0.5, creditDecay(1, 160, 16, 160), 1e-12)
	require.InDelta(t, 1.0, creditDecay(1, 0, 16, 160), 1e-12)
	require.InDelta(t, 1.0/3, creditDecay(2, 160, 16, 160), 1e-12)
}

// cacheOn reports that w's rank 0 holds the complete blocks of toks, as
// its kv-events publisher would, into a tracker of its own.
func cacheOn(t *testing.T, tr *kv.Tracker, w *discovery.Worker, toks []uint32) {
	t.Helper()
	local := kv.BlockHashes(toks, int(w.BlockSize), kv.Seed("", ""))
	blocks := make([]wire.StoredBlock, len(local))
	for i, h := range local {
		blocks[i] = wire.StoredBlock{BlockHash: h ^ w.InstanceID, TokensHash: h}
	}
	ev := wire.RouterEvent{WorkerID: w.InstanceID, StorageTier: "device", Event: wire.KvCacheEvent{
		EventID: 1, Data: wire.KvEventData{Stored: &wire.KvStoreData{Blocks: blocks}}}}
	at := time.Unix(0, 0)
	require.Equal(t, "applied", tr.Apply(&events.KVMessage{At: at, Namespace: w.Namespace, PublisherID: 77,
		Frames: wire.KVEventsMessage(77, 1, ev, at)}))
}
