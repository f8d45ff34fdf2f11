package picker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/discovery"
	"switchyard/router/kv"
)

// leastKVFixture is a fixture whose picker is the example policy, built by
// name as the simulator and bench pickers build it.
func leastKVFixture(t *testing.T, workers ...*discovery.Worker) *fixture {
	f := newFixture(t, workers...)
	p, err := New(NameLeastKVBlocks, Deps{Store: f.store, Count: func(role, reason string) { f.counts[role+"/"+reason]++ }})
	require.NoError(t, err)
	f.picker = p.(*Scheduler)
	return f
}

func TestLeastKVBlocksCountsBlocksNotTheirShareOfCapacity(t *testing.T) {
	big, small := worker("ns", 1, discovery.RoleDecode), worker("ns", 2, discovery.RoleDecode)
	small.Runtime.TotalKVBlocks = u64(100)
	f := leastKVFixture(t, big, small)
	f.sample(big, 0, wire.ActiveLoad{KVUsedBlocks: u64(100)})  // 10 % of 1000
	f.sample(small, 0, wire.ActiveLoad{KVUsedBlocks: u64(50)}) // 50 % of 100
	// 40 blocks per pick: the small worker has fewer blocks in use (50,
	// then 90) until its unanswered blocks pass the big worker's 100.
	require.Equal(t, []uint64{2, 2, 1}, f.decodeIDs(3, 16*40))
	require.Equal(t, 3, f.counts["decode/load"])

	load := newFixture(t, big, small)
	load.sample(big, 0, wire.ActiveLoad{KVUsedBlocks: u64(100)})
	load.sample(small, 0, wire.ActiveLoad{KVUsedBlocks: u64(50)})
	require.Equal(t, []uint64{1}, load.decodeIDs(1, 16*40), "the load picker weighs capacity instead")
}

func TestLeastKVBlocksKeepsTheSharedCandidateRules(t *testing.T) {
	p1, p2 := worker("ns", 1, discovery.RolePrefill), worker("ns", 2, discovery.RolePrefill)
	d, agg := worker("ns", 3, discovery.RoleDecode), worker("ns", 4, discovery.RoleAggregated)
	f := leastKVFixture(t, p1, p2, d, agg)
	f.sample(p1, 0, wire.ActiveLoad{KVUsedBlocks: u64(30)})
	f.sample(p2, 0, wire.ActiveLoad{KVUsedBlocks: u64(20)})
	f.sample(d, 0, wire.ActiveLoad{KVUsedBlocks: u64(900)})
	f.sample(agg, 0, wire.ActiveLoad{KVUsedBlocks: u64(0)})
	sel, ok := f.pick(16)
	require.True(t, ok)
	require.Equal(t, uint64(3), sel.Decode.WorkerID, "an aggregated worker beside a prefill/decode pool is no candidate")
	require.True(t, sel.HasPrefill)
	require.Equal(t, uint64(2), sel.Prefill.WorkerID)
	require.Equal(t, ReasonLoad, sel.PrefillReason)

	cands := f.picker.Candidates(nil)
	require.Equal(t, []Candidate{
		{Phase: "decode", WorkerID: 3, Cost: 900, Defined: true},
		{Phase: "prefill", WorkerID: 1, Cost: 30, Defined: true},
		{Phase: "prefill", WorkerID: 2, Cost: 20, Defined: true},
	}, cands, "the costs a recording stores beside the selection")
}

func TestLeastKVBlocksStalledSitsOutAndAStaleFleetRotates(t *testing.T) {
	a, b := worker("ns", 1, discovery.RoleDecode), worker("ns", 2, discovery.RoleDecode)
	f := leastKVFixture(t, a, b)
	f.sample(a, 0, wire.ActiveLoad{KVUsedBlocks: u64(0)})
	f.sample(b, 0, wire.ActiveLoad{KVUsedBlocks: u64(500)})
	sel, _ := f.pick(64)
	require.Equal(t, uint64(1), sel.Decode.WorkerID)
	f.clk.Advance(5 * time.Second) // a stays silent with 4 blocks unanswered
	f.sample(b, 0, wire.ActiveLoad{KVUsedBlocks: u64(500)})
	sel, _ = f.pick(0)
	require.Equal(t, uint64(2), sel.Decode.WorkerID, "a may be stalled")

	f.clk.Advance(time.Minute) // every sample stale: rotate, no cost decides
	require.ElementsMatch(t, []uint64{1, 2}, f.decodeIDs(2, 0))
	require.Equal(t, 2, f.counts["decode/round_robin_stale"])
	for _, c := range f.picker.Candidates(nil) {
		require.False(t, c.Defined)
	}
}

func TestRegistryBuildsEveryNamedPicker(t *testing.T) {
	require.Equal(t, []string{NameLoad, NameRoundRobin, NameRandom, NameKV, NameLeastKVBlocks, NameLoadTracked, NameKVTracked}, Names())
	w := worker("ns", 1, discovery.RoleAggregated)
	for _, name := range Names() {
		f := newFixture(t, w)
		p, err := New(name, Deps{Store: f.store, Tracker: kv.NewTracker(nil)})
		require.NoError(t, err, name)
		sel, ok := p.Pick(Request{ID: 1, Model: "m", Namespaces: []string{"ns"}, Now: f.clk.Now()}, f.snap)
		require.True(t, ok, name)
		require.Equal(t, uint64(1), sel.Decode.WorkerID, name)
	}
	_, err := New("fastest", Deps{})
	require.ErrorContains(t, err, `unknown picker "fastest" (known: load, round_robin, random, kv, least_kv_blocks, load_tracked, kv_tracked)`)
	_, err = New(NameKV, Deps{})
	require.ErrorContains(t, err, "needs a KV tracker")
}
