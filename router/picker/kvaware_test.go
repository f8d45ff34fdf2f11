package picker

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/discovery"
	"switchyard/router/events"
	"switchyard/router/kv"
)

// kvFixture is a fixture whose picker is KV-aware over a real tracker.
type kvFixture struct {
	*fixture
	tracker  *kv.Tracker
	kvCounts map[string]int
	eventID  map[uint64]uint64
	kvSeq    uint64
}

func newKVFixture(t *testing.T, o KVOptions, workers ...*discovery.Worker) *kvFixture {
	f := &kvFixture{fixture: newFixture(t, workers...), kvCounts: map[string]int{}, eventID: map[uint64]uint64{}}
	f.tracker = kv.NewTracker(nil)
	f.tracker.SetLive(f.snap)
	f.picker = NewKVAware(f.store, f.tracker, o, 1, func(role, reason string) { f.counts[role+"/"+reason]++ },
		func(r string) { f.kvCounts[r]++ })
	return f
}

// tokens is a deterministic prompt: n tokens starting at from.
func tokens(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

// cache reports that w's rank 0 now holds the complete blocks of toks, as
// a worker's kv-events publisher would (one Stored chain from the root).
func (f *kvFixture) cache(w *discovery.Worker, toks []uint32) {
	local := kv.BlockHashes(toks, int(w.BlockSize), kv.Seed("", ""))
	blocks := make([]wire.StoredBlock, len(local))
	for i, h := range local {
		blocks[i] = wire.StoredBlock{BlockHash: h ^ w.InstanceID, TokensHash: h}
	}
	f.eventID[w.InstanceID]++
	f.kvSeq++
	ev := wire.RouterEvent{WorkerID: w.InstanceID, StorageTier: "device", Event: wire.KvCacheEvent{
		EventID: f.eventID[w.InstanceID], Data: wire.KvEventData{Stored: &wire.KvStoreData{Blocks: blocks}}}}
	res := f.tracker.Apply(&events.KVMessage{At: f.clk.Now(), Namespace: w.Namespace, PublisherID: 99,
		Frames: wire.KVEventsMessage(99, f.kvSeq, ev, f.clk.Now())})
	require.Equal(f.t, "applied", res)
}

func (f *kvFixture) pickTokens(toks []uint32) Selection {
	f.nextID++
	req := Request{ID: f.nextID, Model: "m", Namespaces: []string{"ns"}, PromptTokens: uint64(len(toks)),
		Tokens: toks, Now: f.clk.Now()}
	sel, ok := f.dispatch(req)
	require.True(f.t, ok)
	return sel
}

func aggregated(id uint64) *discovery.Worker { return worker("ns", id, discovery.RoleAggregated) }

func TestKVOverlapWinsOnAnAggregatedFleet(t *testing.T) {
	a, b, c := aggregated(1), aggregated(2), aggregated(3)
	f := newKVFixture(t, DefaultKVOptions(), a, b, c)
	prompt := tokens(0, 160) // 10 blocks of 16
	f.cache(b, prompt[:128]) // b holds 8 of them
	for _, w := range []*discovery.Worker{a, b, c} {
		f.sample(w, 0, wire.ActiveLoad{KVUsedBlocks: u64(50)})
	}
	sel := f.pickTokens(prompt)
	require.Equal(t, uint64(2), sel.Decode.WorkerID)
	require.Equal(t, ReasonKVAware, sel.DecodeReason)
	require.False(t, sel.HasPrefill)
	require.Equal(t, 1, f.kvCounts[KVOverlap])

	// The costs follow the formula: isl 160, bs 16, kv_used 50 for all.
	cands := f.picker.Candidates(nil)
	require.Len(t, cands, 3)
	want := map[uint64]float64{
		1: 160.0/16 + 50 + 10,           // no overlap
		2: (160.0/16 - 8) + 50 + 10 - 8, // credit 8 blocks, decode needs 2 new blocks
		3: 160.0/16 + 50 + 10,
	}
	for _, c := range cands {
		require.InDelta(t, want[c.WorkerID], c.Cost, 1e-9, "worker %d", c.WorkerID)
	}
}

func TestLoadOutweighsASmallOverlap(t *testing.T) {
	a, b := aggregated(1), aggregated(2)
	f := newKVFixture(t, DefaultKVOptions(), a, b)
	prompt := tokens(1000, 160)
	f.cache(b, prompt[:32]) // 2 blocks
	f.sample(a, 0, wire.ActiveLoad{KVUsedBlocks: u64(10)})
	f.sample(b, 0, wire.ActiveLoad{KVUsedBlocks: u64(400)})
	require.Equal(t, uint64(1), f.pickTokens(prompt).Decode.WorkerID)
	require.Equal(t, 1, f.kvCounts[KVNoOverlap], "the chosen rank holds nothing")
}

func TestPrefillPoolScoredByOverlapDecodeByLoad(t *testing.T) {
	p1, p2 := worker("ns", 1, discovery.RolePrefill), worker("ns", 2, discovery.RolePrefill)
	d1, d2 := worker("ns", 3, discovery.RoleDecode), worker("ns", 4, discovery.RoleDecode)
	f := newKVFixture(t, DefaultKVOptions(), p1, p2, d1, d2)
	prompt := tokens(7, 320)
	f.cache(p2, prompt)
	f.cache(d1, prompt) // overlap on a decode worker must not matter
	f.sample(d1, 0, wire.ActiveLoad{KVUsedBlocks: u64(300)})
	f.sample(d2, 0, wire.ActiveLoad{KVUsedBlocks: u64(100)})
	sel := f.pickTokens(prompt)
	require.Equal(t, uint64(4), sel.Decode.WorkerID, "decode follows the load-only rule")
	require.Equal(t, ReasonLoad, sel.DecodeReason)
	require.True(t, sel.HasPrefill)
	require.Equal(t, uint64(2), sel.Prefill.WorkerID, "the prefill worker holding the prompt wins")
	require.Equal(t, ReasonKVAware, sel.PrefillReason)
}

func TestDecodeOnlyPoolIsScoredByOverlap(t *testing.T) {
	// Decode workers with no prefill pool beside them prefill locally
	// (no_prefill_pool), so their own cache saves them the prompt's
	// prefill, as on an aggregated fleet.
	d1, d2, d3 := worker("ns", 1, discovery.RoleDecode), worker("ns", 2, discovery.RoleDecode),
		worker("ns", 3, discovery.RoleDecode)
	f := newKVFixture(t, DefaultKVOptions(), d1, d2, d3)
	prompt := tokens(0, 320) // 20 blocks of 16
	f.cache(d3, prompt)
	f.sample(d1, 0, wire.ActiveLoad{KVUsedBlocks: u64(40)})
	f.sample(d2, 0, wire.ActiveLoad{KVUsedBlocks: u64(40)})
	f.sample(d3, 0, wire.ActiveLoad{KVUsedBlocks: u64(50)}) // busier, yet it holds the prompt
	sel := f.pickTokens(prompt)
	require.Equal(t, uint64(3), sel.Decode.WorkerID)
	require.Equal(t, ReasonKVAware, sel.DecodeReason)
	require.False(t, sel.HasPrefill)
	require.Equal(t, ReasonNoPrefillPool, sel.PrefillReason)
	require.Equal(t, 1, f.kvCounts[KVOverlap])
}

func TestNoTokensScoresWithoutTheKVTerm(t *testing.T) {
	a, b := aggregated(1), aggregated(2)
	f := newKVFixture(t, DefaultKVOptions(), a, b)
	f.cache(b, tokens(0, 160))
	f.sample(a, 0, wire.ActiveLoad{KVUsedBlocks: u64(10)})
	f.sample(b, 0, wire.ActiveLoad{KVUsedBlocks: u64(20)})
	sel, ok := f.pick(160) // a client request: no token ids
	require.True(t, ok)
	require.Equal(t, uint64(1), sel.Decode.WorkerID)
	require.Equal(t, 1, f.kvCounts[KVTokenizerUnavailable])
}

func TestNoFreshBacklogCompetesOnOverlapAndSize(t *testing.T) {
	p1, p2, p3, d := worker("ns", 1, discovery.RolePrefill), worker("ns", 2, discovery.RolePrefill),
		worker("ns", 3, discovery.RolePrefill), worker("ns", 4, discovery.RoleDecode)
	f := newKVFixture(t, DefaultKVOptions(), p1, p2, p3, d)
	// dynamo.vllm prefill workers publish no active_prefill_tokens.
	for _, w := range []*discovery.Worker{p1, p2, p3} {
		f.sample(w, 0, wire.ActiveLoad{KVUsedBlocks: u64(5)})
	}
	prompt := tokens(50, 64)
	f.cache(p3, prompt[:32])
	require.Equal(t, uint64(3), f.pickTokens(prompt).Prefill.WorkerID)
	// Without overlap anywhere, equal costs rotate as round_robin_stale.
	other := tokens(9000, 64)
	a, b := f.pickTokens(other), f.pickTokens(other)
	require.NotEqual(t, a.Prefill.WorkerID, b.Prefill.WorkerID)
	require.Equal(t, ReasonRoundRobinStale, a.PrefillReason)
}

func TestStalledRankSitsOutDespiteItsOverlap(t *testing.T) {
	a, b := aggregated(1), aggregated(2)
	f := newKVFixture(t, DefaultKVOptions(), a, b)
	prompt := tokens(0, 160)
	f.cache(b, prompt)
	f.sample(a, 0, wire.ActiveLoad{KVUsedBlocks: u64(10)})
	f.sample(b, 0, wire.ActiveLoad{KVUsedBlocks: u64(10)})
	require.Equal(t, uint64(2), f.pickTokens(prompt).Decode.WorkerID)
	// b never answers that dispatch; after the stall window it sits out.
	f.clk.Advance(6e9)
	f.sample(a, 0, wire.ActiveLoad{KVUsedBlocks: u64(11)})
	require.Equal(t, uint64(1), f.pickTokens(prompt).Decode.WorkerID)
}

func TestTemperatureSamplesInProportion(t *testing.T) {
	a, b := aggregated(1), aggregated(2)
	o := DefaultKVOptions()
	o.Temperature = 1
	f := newKVFixture(t, o, a, b)
	prompt := tokens(0, 160)
	f.cache(b, prompt)
	picks := map[uint64]int{}
	for i := 0; i < 2000; i++ {
		f.sample(a, 0, wire.ActiveLoad{KVUsedBlocks: u64(uint64(10 + i%2))})
		f.sample(b, 0, wire.ActiveLoad{KVUsedBlocks: u64(uint64(10 + i%2))})
		picks[f.pickTokens(prompt).Decode.WorkerID]++
	}
	// With two candidates the cheaper has weight 1, the dearer e^-1, so
	// it wins 1/(1+e^-1) ≈ 73% of draws.
	share := float64(picks[2]) / 2000
	require.InDelta(t, 1/(1+math.Exp(-1)), share, 0.05, "picks %v", picks)
}

func TestConditionalBypassLetsDecodePrefillSmallUncachedPrompts(t *testing.T) {
	p, d := worker("ns", 1, discovery.RolePrefill), worker("ns", 2, discovery.RoleDecode)
	o := DefaultKVOptions()
	o.ConditionalDisagg = true
	threshold := 0.5
	o.DecodeBusyThreshold = &threshold
	f := newKVFixture(t, o, p, d)
	f.sample(d, 0, wire.ActiveLoad{KVUsedBlocks: u64(100)})
	sel := f.pickTokens(tokens(0, 1000))
	require.True(t, sel.Bypass)
	require.False(t, sel.HasPrefill)
	require.Equal(t, ReasonConditionalBypass, sel.DecodeReason)
	require.Equal(t, 1, f.kvCounts[KVBypass])

	// Over the busy threshold (500 of 1000 blocks) the pair is kept.
	f.sample(d, 0, wire.ActiveLoad{KVUsedBlocks: u64(600)})
	sel = f.pickTokens(tokens(0, 1000))
	require.False(t, sel.Bypass)
	require.True(t, sel.HasPrefill)
	// And a long uncached prompt always takes the prefill worker.
	f.sample(d, 0, wire.ActiveLoad{KVUsedBlocks: u64(10)})
	require.True(t, f.pickTokens(tokens(0, 6000)).HasPrefill)
}

func TestKVPickIsAllocationFreeOnceWarm(t *testing.T) {
	ws := []*discovery.Worker{aggregated(1), aggregated(2), aggregated(3), aggregated(4)}
	f := newKVFixture(t, DefaultKVOptions(), ws...)
	prompt := tokens(0, 1024)
	f.cache(ws[2], prompt[:512])
	for _, w := range ws {
		f.sample(w, 0, wire.ActiveLoad{KVUsedBlocks: u64(10)})
	}
	// Counters that allocate (the fixture's join strings) stay out.
	f.picker = NewKVAware(f.store, f.tracker, DefaultKVOptions(), 1, nil, nil)
	req := Request{ID: 1, Model: "m", Namespaces: []string{"ns"}, PromptTokens: 1024, Tokens: prompt, Now: f.clk.Now()}
	f.dispatch(req)
	allocs := testing.AllocsPerRun(100, func() {
		req.ID++
		f.dispatch(req)
	})
	require.Zero(t, allocs)
}

// BenchmarkPickKV is BenchmarkPick for the KV-aware picker on the same
// fleets (half prefill, half decode), with a 2,048-token prompt (128
// blocks) whose first half every other prefill rank holds: hashing the
// prompt, one index walk, the formula over every prefill candidate.
func BenchmarkPickKV(b *testing.B) {
	for _, n := range []int{8, 64, 512} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			base := benchFixture(b, n)
			f := &kvFixture{fixture: base, eventID: map[uint64]uint64{}}
			f.tracker = kv.NewTracker(nil)
			f.tracker.SetLive(f.snap)
			f.picker = NewKVAware(f.store, f.tracker, DefaultKVOptions(), 1, nil, nil)
			prompt := tokens(0, 2048)
			for i, w := range f.snap.Workers {
				if w.Role == discovery.RolePrefill && i%4 == 0 {
					f.cache(w, prompt[:1024])
				}
			}
			req := Request{Model: "m", Namespaces: []string{"ns"}, PromptTokens: 2048, Tokens: prompt}
			for i := 0; i < 2000; i++ {
				req.Now = f.clk.Now()
				f.dispatch(req)
				f.clk.Advance(50 * time.Millisecond)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req.ID, req.Now = uint64(i), req.Now.Add(50*time.Millisecond)
				if _, ok := f.dispatch(req); !ok {
					b.Fatal("no pick")
				}
			}
		})
	}
}

func TestBlockSizesBeyondTwoScoreWithoutOverlap(t *testing.T) {
	sizes := []uint32{16, 32, 64, 8}
	var ws []*discovery.Worker
	for i, bs := range sizes {
		w := aggregated(uint64(i + 1))
		w.BlockSize = bs
		ws = append(ws, w)
	}
	f := newKVFixture(t, DefaultKVOptions(), ws...)
	prompt := tokens(0, 256)
	f.cache(ws[2], prompt) // a 64-token block size: the third one seen, not hashed
	for _, w := range ws {
		f.sample(w, 0, wire.ActiveLoad{KVUsedBlocks: u64(500)})
	}
	// The 8-token worker is below 16: never hashed either.
	f.sample(ws[2], 0, wire.ActiveLoad{KVUsedBlocks: u64(0)})
	sel := f.pickTokens(prompt)
	require.Equal(t, uint64(3), sel.Decode.WorkerID, "its load wins, its overlap is not seen")
	require.Equal(t, 1, f.kvCounts[KVUnsupported])
}

func TestUnsupportedBlockSizesAreReported(t *testing.T) {
	a, b, c, d := aggregated(1), aggregated(2), aggregated(3), aggregated(4)
	a.BlockSize, b.BlockSize, c.BlockSize, d.BlockSize = 16, 32, 64, 8
	f := newKVFixture(t, DefaultKVOptions(), a, b, c, d)
	var heard []string
	p, err := New(NameKV, Deps{Store: f.store, Tracker: f.tracker, KV: DefaultKVOptions(),
		KVUnsupported: func(model string, bs int) { heard = append(heard, fmt.Sprint(model, "/", bs)) }})
	require.NoError(t, err)
	f.picker = p.(*Scheduler)
	f.pickTokens(tokens(0, 128))
	require.ElementsMatch(t, []string{"m/64", "m/8"}, heard, "a third size and one below 16")
}

// tokenBlocks hands a prompt's block hashes without its token ids, as the
// simulator does.
type tokenBlocks []uint32

func (t tokenBlocks) AppendBlockHashes(dst []uint64, bs int, seed uint64) []uint64 {
	return kv.AppendBlockHashes(dst, t, bs, seed)
}

// A prompt given as block hashes scores the overlap its token ids would.
func TestKVOverlapFromGivenBlockHashes(t *testing.T) {
	a, b := aggregated(1), aggregated(2)
	f := newKVFixture(t, DefaultKVOptions(), a, b)
	prompt := tokens(0, 160)
	f.cache(b, prompt[:128])
	for _, w := range []*discovery.Worker{a, b} {
		f.sample(w, 0, wire.ActiveLoad{KVUsedBlocks: u64(50)})
	}
	f.nextID++
	sel, ok := f.dispatch(Request{ID: f.nextID, Model: "m", Namespaces: []string{"ns"}, PromptTokens: 160,
		Blocks: tokenBlocks(prompt), Now: f.clk.Now()})
	require.True(t, ok)
	require.Equal(t, uint64(2), sel.Decode.WorkerID)
	require.Equal(t, ReasonKVAware, sel.DecodeReason)
	require.Equal(t, 1, f.kvCounts[KVOverlap])
	require.Zero(t, f.kvCounts[KVTokenizerUnavailable])
}
