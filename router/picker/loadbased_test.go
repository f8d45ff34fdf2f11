package picker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/events"
	"switchyard/router/load"
)

var t0 = time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)

func u64(v uint64) *uint64 { return &v }

func worker(ns string, id uint64, role discovery.Role) *discovery.Worker {
	return &discovery.Worker{Namespace: ns, InstanceID: id, Role: role, Model: "m", BlockSize: 16, HasCard: true,
		Runtime: discovery.RuntimeConfig{TotalKVBlocks: u64(1000), MaxNumBatchedTokens: u64(2048), DPSize: 1}}
}

// fixture is a fleet, its load store, a picker and a Manual clock.
type fixture struct {
	t      *testing.T
	snap   *discovery.Snapshot
	store  *load.Store
	picker *Scheduler
	clk    *clock.Manual
	counts map[string]int
	seq    uint64
	nextID uint64
}

func newFixture(t *testing.T, workers ...*discovery.Worker) *fixture {
	f := &fixture{t: t, snap: &discovery.Snapshot{View: discovery.View{Workers: workers}},
		store: load.NewStore(nil), clk: clock.NewManual(t0), counts: map[string]int{}}
	f.store.SetLive(f.snap)
	f.picker = NewLoad(f.store, func(role, reason string) { f.counts[role+"/"+reason]++ })
	return f
}

// sample publishes one ActiveLoad for a worker rank at the current time.
func (f *fixture) sample(w *discovery.Worker, rank uint32, a wire.ActiveLoad) {
	f.seq++
	a.WorkerID, a.DPRank = w.InstanceID, rank
	ev := &events.LoadMessage{At: f.clk.Now(), Namespace: w.Namespace, PublisherID: 77,
		Frames: wire.LoadMessage(77, f.seq, a, f.clk.Now())}
	require.Equal(f.t, envelope.Applied, f.store.Apply(ev))
}

func (f *fixture) pick(prompt uint64, namespaces ...string) (Selection, bool) {
	if len(namespaces) == 0 {
		namespaces = []string{"ns"}
	}
	f.nextID++
	return f.dispatch(Request{ID: f.nextID, Model: "m", Namespaces: namespaces, PromptTokens: prompt, Now: f.clk.Now()})
}

// dispatch picks req and charges what it pinned, as the routing core
// does after every pick.
func (f *fixture) dispatch(req Request) (Selection, bool) {
	sel, ok := f.picker.Pick(req, f.snap)
	if ok {
		Dispatch(f.store, req, sel)
	}
	return sel, ok
}

func (f *fixture) decodeIDs(n int, prompt uint64) []uint64 {
	var out []uint64
	for i := 0; i < n; i++ {
		sel, ok := f.pick(prompt)
		require.True(f.t, ok)
		out = append(out, sel.Decode.WorkerID)
	}
	return out
}

func TestLowestDecodeCostWinsAndVLLMPrefillRotates(t *testing.T) {
	p1, p2 := worker("ns", 1, discovery.RolePrefill), worker("ns", 2, discovery.RolePrefill)
	d1, d2 := worker("ns", 3, discovery.RoleDecode), worker("ns", 4, discovery.RoleDecode)
	f := newFixture(t, p1, p2, d1, d2)
	// dynamo.vllm 1.4.2: kv_used_blocks only; active_* are nil.
	f.sample(d1, 0, wire.ActiveLoad{KVUsedBlocks: u64(100)})
	f.sample(d2, 0, wire.ActiveLoad{KVUsedBlocks: u64(50)})
	f.sample(p1, 0, wire.ActiveLoad{KVUsedBlocks: u64(5)})
	f.sample(p2, 0, wire.ActiveLoad{KVUsedBlocks: u64(5)})

	sel, ok := f.pick(32)
	require.True(t, ok)
	require.Equal(t, uint64(4), sel.Decode.WorkerID)
	require.Equal(t, ReasonLoad, sel.DecodeReason)
	require.True(t, sel.HasPrefill)
	require.Equal(t, ReasonRoundRobinStale, sel.PrefillReason, "no prefill worker publishes active_prefill_tokens")
	first := sel.Prefill.WorkerID
	sel, _ = f.pick(32)
	require.NotEqual(t, first, sel.Prefill.WorkerID, "the prefill cursor rotates")
	require.Equal(t, 2, f.counts["prefill/round_robin_stale"])
}

func TestPrefillCostUsesActivePrefillTokens(t *testing.T) {
	p1, p2, d := worker("ns", 1, discovery.RolePrefill), worker("ns", 2, discovery.RolePrefill), worker("ns", 3, discovery.RoleDecode)
	f := newFixture(t, p1, p2, d)
	f.sample(p1, 0, wire.ActiveLoad{ActivePrefillTokens: u64(4000)})
	f.sample(p2, 0, wire.ActiveLoad{ActivePrefillTokens: u64(1000)})
	f.sample(d, 0, wire.ActiveLoad{ActiveDecodeBlocks: u64(1)})
	sel, _ := f.pick(100)
	require.Equal(t, uint64(2), sel.Prefill.WorkerID)
	require.Equal(t, ReasonLoad, sel.PrefillReason)
}

func TestEqualCostsRotateOnThePhaseCursor(t *testing.T) {
	d1, d2, d3 := worker("ns", 1, discovery.RoleDecode), worker("ns", 2, discovery.RoleDecode), worker("ns", 3, discovery.RoleDecode)
	f := newFixture(t, d1, d2, d3)
	for _, w := range []*discovery.Worker{d1, d2, d3} {
		f.sample(w, 0, wire.ActiveLoad{KVUsedBlocks: u64(10)})
	}
	// Zero-token prompts leave no unanswered blocks, so costs stay equal.
	require.Equal(t, []uint64{1, 2, 3, 1}, f.decodeIDs(4, 0))
}

func TestQuietCompetesAndUnansweredDispatchesSpreadABurst(t *testing.T) {
	busy, quiet := worker("ns", 1, discovery.RoleDecode), worker("ns", 2, discovery.RoleDecode)
	f := newFixture(t, busy, quiet)
	f.sample(busy, 0, wire.ActiveLoad{KVUsedBlocks: u64(20)})
	// The quiet worker never published: zero backlog, and it wins until the
	// blocks pinned to it catch up with the busy worker's.
	ids := f.decodeIDs(4, 16*8) // 8 blocks each
	require.Equal(t, []uint64{2, 2, 2, 1}, ids, "0, 8, 16 unanswered blocks < 20; at 24 the busy worker wins")
	f.sample(quiet, 0, wire.ActiveLoad{KVUsedBlocks: u64(0)})
	sel, _ := f.pick(16)
	require.Equal(t, uint64(2), sel.Decode.WorkerID, "a sample answers its unanswered dispatches")
}

func TestSilentUnderLoadSitsOutAndAStaleFleetRotates(t *testing.T) {
	silent, fresh := worker("ns", 1, discovery.RoleDecode), worker("ns", 2, discovery.RoleDecode)
	f := newFixture(t, silent, fresh)
	f.sample(silent, 0, wire.ActiveLoad{KVUsedBlocks: u64(10)})
	f.clk.Advance(5 * time.Second) // the silent worker's sample is stale now
	f.sample(fresh, 0, wire.ActiveLoad{KVUsedBlocks: u64(900)})
	require.Equal(t, []uint64{2, 2}, f.decodeIDs(2, 0), "a stale busy sample has no cost while another has one")

	// Everything stale: the load stream is down; rotate over every worker.
	f.clk.Advance(time.Minute)
	ids := f.decodeIDs(2, 0)
	require.ElementsMatch(t, []uint64{1, 2}, ids)
	require.Equal(t, 2, f.counts["decode/round_robin_stale"])
}

func TestStalledWorkerSitsOutUntilASample(t *testing.T) {
	a, b := worker("ns", 1, discovery.RoleDecode), worker("ns", 2, discovery.RoleDecode)
	f := newFixture(t, a, b)
	f.sample(a, 0, wire.ActiveLoad{KVUsedBlocks: u64(0)})
	f.sample(b, 0, wire.ActiveLoad{KVUsedBlocks: u64(500)})
	sel, _ := f.pick(64) // 4 blocks to a (aggregated pool: not a paired decode)
	require.Equal(t, uint64(1), sel.Decode.WorkerID)
	// Keep b fresh; a stays silent for 5 s with 4 blocks unanswered.
	f.clk.Advance(5 * time.Second)
	f.sample(b, 0, wire.ActiveLoad{KVUsedBlocks: u64(500)})
	sel, _ = f.pick(0)
	require.Equal(t, uint64(2), sel.Decode.WorkerID, "a may be stalled")
	f.sample(a, 0, wire.ActiveLoad{KVUsedBlocks: u64(4)})
	sel, _ = f.pick(0)
	require.Equal(t, uint64(1), sel.Decode.WorkerID, "a sample clears the stall")

	// An ended request does not stall its worker.
	sel, _ = f.pick(64)
	require.Equal(t, uint64(1), sel.Decode.WorkerID)
	EndDispatch(f.store, Request{ID: f.nextID}, sel)
	f.clk.Advance(5 * time.Second)
	f.sample(b, 0, wire.ActiveLoad{KVUsedBlocks: u64(500)})
	f.store.SetMaxStaleness(time.Minute) // keep a's last sample fresh
	sel, _ = f.pick(0)
	require.Equal(t, uint64(1), sel.Decode.WorkerID)
}

func TestDataParallelRanksAreCandidates(t *testing.T) {
	d := worker("ns", 9, discovery.RoleDecode)
	d.Runtime.DPStartRank, d.Runtime.DPSize, d.Runtime.DPDeclared = 4, 2, true
	f := newFixture(t, d)
	f.sample(d, 4, wire.ActiveLoad{KVUsedBlocks: u64(300)})
	f.sample(d, 5, wire.ActiveLoad{KVUsedBlocks: u64(100)})
	sel, _ := f.pick(0)
	require.Equal(t, Pin{WorkerID: 9, DPRank: 5, DPDeclared: true, Role: discovery.RoleDecode}, sel.Decode)
	require.False(t, sel.HasPrefill)
	require.Equal(t, ReasonNoPrefillPool, sel.PrefillReason)
}

func TestMixedNamespaceRules(t *testing.T) {
	// A namespace with prefill and decode workers: its aggregated worker is
	// never a decode candidate, even when it is the least loaded.
	p, d, agg := worker("ns", 1, discovery.RolePrefill), worker("ns", 2, discovery.RoleDecode), worker("ns", 3, discovery.RoleAggregated)
	f := newFixture(t, p, d, agg)
	f.sample(d, 0, wire.ActiveLoad{KVUsedBlocks: u64(900)})
	f.sample(agg, 0, wire.ActiveLoad{KVUsedBlocks: u64(0)})
	for i := 0; i < 3; i++ {
		sel, ok := f.pick(0)
		require.True(t, ok)
		require.Equal(t, uint64(2), sel.Decode.WorkerID)
		require.True(t, sel.HasPrefill)
	}

	// Prefill beside aggregated workers alone: the aggregated worker wins and
	// no prefill worker is ever paired with it.
	f = newFixture(t, worker("ns", 1, discovery.RolePrefill), worker("ns", 3, discovery.RoleAggregated))
	sel, ok := f.pick(0)
	require.True(t, ok)
	require.Equal(t, uint64(3), sel.Decode.WorkerID)
	require.False(t, sel.HasPrefill)
	require.Equal(t, 1, f.counts["prefill/no_prefill_pool"])

	// Decode and aggregated without prefill: both are decode candidates.
	f = newFixture(t, worker("ns", 2, discovery.RoleDecode), worker("ns", 3, discovery.RoleAggregated))
	require.ElementsMatch(t, []uint64{2, 3}, f.decodeIDs(2, 0))

	// Prefill workers only, or unknown roles only: nothing serves the model.
	f = newFixture(t, worker("ns", 1, discovery.RolePrefill), worker("ns", 5, discovery.RoleUnknown))
	_, ok = f.pick(0)
	require.False(t, ok)
}

func TestSeveralNamespaces(t *testing.T) {
	busyD, idleD := worker("prod", 1, discovery.RoleDecode), worker("canary", 2, discovery.RoleDecode)
	prodP, canaryP := worker("prod", 3, discovery.RolePrefill), worker("canary", 4, discovery.RolePrefill)
	f := newFixture(t, busyD, idleD, prodP, canaryP)
	f.snap.Workers = []*discovery.Worker{idleD, canaryP, busyD, prodP} // snapshot order: namespace, id
	f.sample(busyD, 0, wire.ActiveLoad{KVUsedBlocks: u64(800)})
	f.sample(idleD, 0, wire.ActiveLoad{KVUsedBlocks: u64(10)})
	sel, ok := f.pick(0, "prod", "canary")
	require.True(t, ok)
	require.Equal(t, "canary", sel.Namespace, "decode is compared across namespaces")
	require.Equal(t, uint64(4), sel.Prefill.WorkerID, "prefill is chosen within the winner's namespace")

	// Only namespaces with a usable shim replica are offered.
	sel, ok = f.pick(0, "prod")
	require.True(t, ok)
	require.Equal(t, "prod", sel.Namespace)
	require.Equal(t, uint64(3), sel.Prefill.WorkerID)
	_, ok = f.pick(0, "staging")
	require.False(t, ok)
}

func TestWorkersWithoutCapacityRotate(t *testing.T) {
	a, b := worker("ns", 1, discovery.RoleDecode), worker("ns", 2, discovery.RoleDecode)
	a.Runtime.TotalKVBlocks, b.Runtime.TotalKVBlocks = nil, nil
	f := newFixture(t, a, b)
	require.Equal(t, []uint64{1, 2}, f.decodeIDs(2, 100))
	require.Equal(t, 2, f.counts["decode/round_robin"])
}

func TestHeuristicEstimate(t *testing.T) {
	require.Zero(t, Heuristic{}.Estimate(""))
	require.Equal(t, uint64(3), Heuristic{}.Estimate("hello world"), "2 words * 4/3 < 11 chars / 4")
	require.Equal(t, uint64(250), Heuristic{}.Estimate(string(make([]byte, 1000))), "no spaces: chars/4")
	require.Equal(t, uint64(5), Heuristic{}.Estimate("日本語です"), "CJK counts about a token per character")
}

// fleetOf builds n workers, half prefill and half decode, all with fresh samples.
func benchFixture(b *testing.B, n int) *fixture {
	t := &testing.T{}
	var ws []*discovery.Worker
	for i := 0; i < n; i++ {
		role := discovery.RoleDecode
		if i%2 == 0 {
			role = discovery.RolePrefill
		}
		ws = append(ws, worker("ns", uint64(i+1), role))
	}
	f := newFixture(t, ws...)
	f.picker.count = func(string, string) {} // production counts through pre-resolved counters
	for i, w := range ws {
		f.sample(w, 0, wire.ActiveLoad{KVUsedBlocks: u64(uint64(i * 7 % 500)), ActivePrefillTokens: u64(uint64(i * 13 % 900))})
	}
	f.store.SetMaxStaleness(time.Hour)
	return f
}

// BenchmarkPick measures one decision (prefill and decode) with its
// dispatch accounting. Every pick advances the clock 50 ms, so a rank's
// unanswered dispatches stay as few as in a fleet whose samples answer
// them; samples stay fresh (max staleness is raised for the benchmark).
func BenchmarkPick(b *testing.B) {
	for _, n := range []int{8, 64, 512} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			f := benchFixture(b, n)
			req := Request{Model: "m", Namespaces: []string{"ns"}, PromptTokens: 512}
			for i := 0; i < 2000; i++ { // reach the steady state of dispatch records
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
