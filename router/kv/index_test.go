package kv

import (
	"slices"
	"testing"
)

var (
	rankA = Rank{"dyn", 1, 0}
	rankB = Rank{"dyn", 2, 0}
	rankC = Rank{"dyn", 3, 0}
)

func liveIndex(t testing.TB, l limits, ranks ...Rank) *Index {
	t.Helper()
	x := newIndex(l)
	if refused := x.SetLive(slices.Values(ranks)); refused != 0 {
		t.Fatalf("SetLive refused %d", refused)
	}
	return x
}

// blocks builds a chain whose engine hashes are base+1, base+2, ...
func blocks(base uint64, tokens ...uint64) []StoredBlock {
	out := make([]StoredBlock, len(tokens))
	for i, tok := range tokens {
		out[i] = StoredBlock{BlockHash: base + uint64(i) + 1, TokensHash: tok}
	}
	return out
}

func storeEv(r Rank, id uint64, bs []StoredBlock) *Event {
	return &Event{WorkerID: r.WorkerID, DPRank: r.DPRank, EventID: id, Kind: Stored, Blocks: bs}
}

func storeUnder(r Rank, id, parent uint64, bs []StoredBlock) *Event {
	ev := storeEv(r, id, bs)
	ev.ParentHash, ev.HasParent = parent, true
	return ev
}

func removeEv(r Rank, id uint64, hashes ...uint64) *Event {
	return &Event{WorkerID: r.WorkerID, DPRank: r.DPRank, EventID: id, Kind: Removed, Removed: hashes}
}

func mustApply(t testing.TB, x *Index, r Rank, ev *Event, want Result) {
	t.Helper()
	if got := x.Apply(r.Namespace, ev); got != want {
		t.Fatalf("Apply(%+v) = %v, want %v", ev, got, want)
	}
	if err := checkIndex(x); err != nil {
		t.Fatalf("after Apply(%+v): %v", ev, err)
	}
}

func matchOf(x *Index, prompt ...uint64) map[Rank]uint32 {
	var out Matches
	x.FindMatches(prompt, &out)
	m := map[Rank]uint32{}
	for i, r := range out.Ranks {
		m[r] = out.Blocks[i]
	}
	return m
}

func wantMatch(t testing.TB, x *Index, prompt []uint64, want map[Rank]uint32) {
	t.Helper()
	got := matchOf(x, prompt...)
	if len(got) != len(want) {
		t.Fatalf("FindMatches(%v) = %v, want %v", prompt, got, want)
	}
	for r, n := range want {
		if got[r] != n {
			t.Fatalf("FindMatches(%v) = %v, want %v", prompt, got, want)
		}
	}
}

func wantSize(t testing.TB, x *Index, nodes, ownerships int) {
	t.Helper()
	st := x.Stats()
	if st.Nodes != nodes || st.Ownerships != ownerships {
		t.Fatalf("index holds %d nodes, %d ownerships; want %d, %d", st.Nodes, st.Ownerships, nodes, ownerships)
	}
}

func TestChainsAndPrefixMatch(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA, rankB)
	mustApply(t, x, rankA, storeEv(rankA, 1, blocks(10, 1, 2, 3)), Applied)
	mustApply(t, x, rankB, storeEv(rankB, 1, blocks(20, 1, 2)), Applied)
	// B's next block hangs under its own block 22 (tokens 1, 2).
	mustApply(t, x, rankB, storeUnder(rankB, 2, 22, blocks(30, 4)), Applied)
	wantSize(t, x, 4, 6)

	wantMatch(t, x, []uint64{1, 2, 3}, map[Rank]uint32{rankA: 3, rankB: 2})
	wantMatch(t, x, []uint64{1, 2, 4, 9}, map[Rank]uint32{rankA: 2, rankB: 3})
	wantMatch(t, x, []uint64{1}, map[Rank]uint32{rankA: 1, rankB: 1})
	wantMatch(t, x, []uint64{2, 3}, map[Rank]uint32{}) // not from the root
	wantMatch(t, x, []uint64{9}, map[Rank]uint32{})
	wantMatch(t, x, nil, map[Rank]uint32{})

	var out Matches
	x.FindMatches([]uint64{1, 2, 3}, &out)
	if out.Of(rankA) != 3 || out.Of(rankC) != 0 || out.Longest() != 3 || out.Len() != 2 {
		t.Fatalf("Matches helpers: %+v", out)
	}
	if out.Blocks[0] > out.Blocks[1] {
		t.Fatalf("scores not in increasing order: %v", out.Blocks)
	}
}

func TestParentNotFoundPlacesNothing(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA, rankB)
	mustApply(t, x, rankA, storeEv(rankA, 0, blocks(10, 1, 2)), Applied)
	// 11 is A's block, not B's: B's store cannot be placed, and is not
	// attached to the root either.
	mustApply(t, x, rankB, storeUnder(rankB, 0, 11, blocks(20, 1)), ParentNotFound)
	mustApply(t, x, rankB, storeUnder(rankB, 0, 999, blocks(20, 5)), ParentNotFound)
	wantSize(t, x, 2, 2)
	wantMatch(t, x, []uint64{1, 2}, map[Rank]uint32{rankA: 2})
	wantMatch(t, x, []uint64{5}, map[Rank]uint32{})
}

func TestTwoEngineHashesNameOneNode(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA)
	mustApply(t, x, rankA, storeEv(rankA, 0, []StoredBlock{{BlockHash: 1, TokensHash: 7}}), Applied)
	mustApply(t, x, rankA, storeEv(rankA, 0, []StoredBlock{{BlockHash: 2, TokensHash: 7}}), Applied)
	wantSize(t, x, 1, 2)
	mustApply(t, x, rankA, removeEv(rankA, 0, 1), Applied)
	wantMatch(t, x, []uint64{7}, map[Rank]uint32{rankA: 1})
	mustApply(t, x, rankA, removeEv(rankA, 0, 2), Applied)
	wantMatch(t, x, []uint64{7}, map[Rank]uint32{})
	wantSize(t, x, 0, 0)
}

func TestSameBlockStoredTwiceIsOneOwnership(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA)
	mustApply(t, x, rankA, storeEv(rankA, 0, blocks(10, 1, 2)), Applied)
	mustApply(t, x, rankA, storeEv(rankA, 0, blocks(10, 1, 2)), Applied)
	wantSize(t, x, 2, 2)
	mustApply(t, x, rankA, removeEv(rankA, 0, 11, 12), Applied)
	wantSize(t, x, 0, 0)
}

func TestEngineHashRepointed(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA)
	mustApply(t, x, rankA, storeEv(rankA, 0, []StoredBlock{{BlockHash: 1, TokensHash: 7}}), Applied)
	mustApply(t, x, rankA, storeEv(rankA, 0, []StoredBlock{{BlockHash: 1, TokensHash: 8}}), Applied)
	wantSize(t, x, 1, 1)
	wantMatch(t, x, []uint64{7}, map[Rank]uint32{})
	wantMatch(t, x, []uint64{8}, map[Rank]uint32{rankA: 1})
}

func TestRemovalKeepsOwnedDescendants(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA)
	mustApply(t, x, rankA, storeEv(rankA, 0, blocks(0, 1, 2, 3, 4)), Applied) // engine hashes 1..4
	mustApply(t, x, rankA, removeEv(rankA, 0, 3), Applied)
	wantMatch(t, x, []uint64{1, 2, 3, 4}, map[Rank]uint32{rankA: 2}) // owns 0, 1, 3: scores 2
	wantSize(t, x, 4, 3)
	mustApply(t, x, rankA, removeEv(rankA, 0, 1), Applied)
	wantMatch(t, x, []uint64{1, 2, 3, 4}, map[Rank]uint32{})
	wantSize(t, x, 4, 2) // ownerless nodes 1 and 3 stay: they lead to owned ones
	mustApply(t, x, rankA, removeEv(rankA, 0, 4), Applied)
	wantSize(t, x, 2, 1) // 4 freed, then 3 (an ownerless leaf); 2 is owned
	mustApply(t, x, rankA, removeEv(rankA, 0, 2), Applied)
	wantSize(t, x, 0, 0) // 2 freed, then 1
}

func TestRemoveUnknownBlock(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA, rankB)
	mustApply(t, x, rankA, storeEv(rankA, 0, blocks(10, 1, 2)), Applied)
	mustApply(t, x, rankB, storeEv(rankB, 0, blocks(20, 1)), Applied)
	mustApply(t, x, rankA, removeEv(rankA, 0, 12, 21, 99), UnknownBlock) // 21 is B's
	wantMatch(t, x, []uint64{1, 2}, map[Rank]uint32{rankA: 1, rankB: 1})
	wantSize(t, x, 1, 2)
}

func TestCursor(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA)
	cursor := func() (uint64, bool) {
		st := x.Stats()
		return st.Ranks[0].Cursor, st.Ranks[0].HasCursor
	}
	steps := []struct {
		name  string
		ev    *Event
		want  Result
		match uint32 // A's match on prompt 1,2,3 afterwards
		cur   uint64
	}{
		{"first event sets the cursor, no gap", storeEv(rankA, 5, blocks(10, 1)), Applied, 1, 5},
		{"next id", storeUnder(rankA, 6, 11, blocks(20, 2)), Applied, 2, 6},
		{"same id is a replay", removeEv(rankA, 6, 11), Replay, 2, 6},
		{"older id is a replay", &Event{WorkerID: 1, EventID: 2, Kind: Cleared}, Replay, 2, 6},
		{"no id bypasses the cursor", storeUnder(rankA, 0, 21, blocks(30, 3)), Applied, 3, 6},
		{"other tier advances the cursor", &Event{WorkerID: 1, EventID: 7, Tier: TierHostPinned, Kind: Cleared}, OtherTier, 3, 7},
		{"malformed advances the cursor", &Event{WorkerID: 1, EventID: 8, Kind: Stored}, Malformed, 3, 8},
		// A jump: the rank is cleared, then the event applies. A chain
		// anchored on a cleared parent places nothing...
		{"gap with a parent-anchored chain", storeUnder(rankA, 10, 31, blocks(40, 4)), Gap, 0, 10},
		// ...and a root-anchored one rebuilds.
		{"next after the gap", storeEv(rankA, 11, blocks(50, 1, 2)), Applied, 2, 11},
		{"gap with a root-anchored chain", storeEv(rankA, 20, blocks(60, 1, 2, 3)), Gap, 3, 20},
	}
	for _, s := range steps {
		got := x.Apply("dyn", s.ev)
		if got != s.want {
			t.Fatalf("%s: Apply = %v, want %v", s.name, got, s.want)
		}
		if err := checkIndex(x); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if m := matchOf(x, 1, 2, 3)[rankA]; m != s.match {
			t.Fatalf("%s: match = %d, want %d", s.name, m, s.match)
		}
		if c, ok := cursor(); !ok || c != s.cur {
			t.Fatalf("%s: cursor = %d (%v), want %d", s.name, c, ok, s.cur)
		}
	}
	// After the gap only the rebuilt chain is held.
	wantSize(t, x, 3, 3)
}

func TestIdentityGate(t *testing.T) {
	x := NewIndex()
	ev := storeEv(rankA, 1, blocks(10, 1))
	if got := x.Apply("dyn", ev); got != IdentityMismatch {
		t.Fatalf("before SetLive: %v", got)
	}
	x.SetLive(slices.Values([]Rank{rankA, {"dyn", 1, 1}}))
	cases := []struct {
		name string
		ns   string
		ev   *Event
	}{
		{"unknown worker", "dyn", storeEv(Rank{"dyn", 9, 0}, 1, blocks(10, 1))},
		{"undeclared dp_rank", "dyn", storeEv(Rank{"dyn", 1, 2}, 1, blocks(10, 1))},
		{"other namespace", "other", storeEv(rankA, 1, blocks(10, 1))},
	}
	for _, c := range cases {
		if got := x.Apply(c.ns, c.ev); got != IdentityMismatch {
			t.Fatalf("%s: Apply = %v", c.name, got)
		}
	}
	wantSize(t, x, 0, 0)
	// Refused events move no cursor.
	for _, r := range x.Stats().Ranks {
		if r.HasCursor {
			t.Fatalf("%v has a cursor", r.Rank)
		}
	}
	if got := x.Apply("dyn", storeEv(Rank{"dyn", 1, 1}, 1, blocks(10, 1))); got != Applied {
		t.Fatalf("declared rank 1: %v", got)
	}
}

func TestOtherTierNotIndexed(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA)
	for _, tier := range []Tier{TierHostPinned, TierDisk, TierExternal, Tier(9)} {
		ev := storeEv(rankA, 0, blocks(10, 1))
		ev.Tier = tier
		mustApply(t, x, rankA, ev, OtherTier)
	}
	wantSize(t, x, 0, 0)
	mustApply(t, x, rankA, storeEv(rankA, 0, blocks(10, 1)), Applied)
	// An other-tier Cleared or Removed leaves the device tier alone.
	mustApply(t, x, rankA, &Event{WorkerID: 1, Tier: TierDisk, Kind: Cleared}, OtherTier)
	ev := removeEv(rankA, 0, 11)
	ev.Tier = TierHostPinned
	mustApply(t, x, rankA, ev, OtherTier)
	wantMatch(t, x, []uint64{1}, map[Rank]uint32{rankA: 1})
}

func TestMalformed(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA)
	for _, ev := range []*Event{
		storeEv(rankA, 0, nil),
		removeEv(rankA, 0),
		{WorkerID: 1, Kind: 0},
		{WorkerID: 1, Kind: Cleared + 1},
	} {
		mustApply(t, x, rankA, ev, Malformed)
	}
	wantSize(t, x, 0, 0)
}

func TestClearedDropsOneRank(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA, rankB)
	mustApply(t, x, rankA, storeEv(rankA, 1, blocks(10, 1, 2)), Applied)
	mustApply(t, x, rankB, storeEv(rankB, 1, blocks(20, 1, 3)), Applied)
	mustApply(t, x, rankA, &Event{WorkerID: 1, EventID: 2, Kind: Cleared}, Applied)
	wantMatch(t, x, []uint64{1, 2}, map[Rank]uint32{rankB: 1})
	wantSize(t, x, 2, 2)
	if st := x.Stats(); st.Ranks[0].Cursor != 2 || !st.Ranks[0].HasCursor {
		t.Fatalf("Cleared reset the cursor: %+v", st.Ranks[0])
	}
}

func TestSetLive(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA, rankB)
	mustApply(t, x, rankA, storeEv(rankA, 10, blocks(10, 1, 2)), Applied)
	mustApply(t, x, rankB, storeEv(rankB, 10, blocks(20, 1, 2)), Applied)

	// A departs: its blocks go at once, B's stay.
	x.SetLive(slices.Values([]Rank{rankB, rankC}))
	if err := checkIndex(x); err != nil {
		t.Fatal(err)
	}
	wantMatch(t, x, []uint64{1, 2}, map[Rank]uint32{rankB: 2})
	mustApply(t, x, rankA, storeEv(rankA, 11, blocks(10, 1)), IdentityMismatch)

	// A returns with no cursor: an id below its old one applies.
	x.SetLive(slices.Values([]Rank{rankA, rankB, rankC}))
	mustApply(t, x, rankA, storeEv(rankA, 3, blocks(10, 1)), Applied)
	mustApply(t, x, rankB, storeEv(rankB, 10, blocks(20, 1)), Replay) // B kept its cursor
	wantMatch(t, x, []uint64{1, 2}, map[Rank]uint32{rankA: 1, rankB: 2})

	// Everyone departs: the index is empty.
	x.SetLive(slices.Values([]Rank(nil)))
	wantSize(t, x, 0, 0)
	if err := checkIndex(x); err != nil {
		t.Fatal(err)
	}
}

func TestSetLiveCeiling(t *testing.T) {
	l := defaultLimits
	l.ranks = 2
	x := newIndex(l)
	// Duplicates count once; ranks past the ceiling are refused in order.
	if refused := x.SetLive(slices.Values([]Rank{rankA, rankA, rankB, rankC})); refused != 1 {
		t.Fatalf("refused %d, want 1", refused)
	}
	mustApply(t, x, rankC, storeEv(rankC, 0, blocks(10, 1)), IdentityMismatch)
	mustApply(t, x, rankB, storeEv(rankB, 0, blocks(10, 1)), Applied)
}

func TestClearRank(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA, rankB)
	mustApply(t, x, rankA, storeEv(rankA, 10, blocks(10, 1, 2)), Applied)
	mustApply(t, x, rankB, storeEv(rankB, 10, blocks(20, 1)), Applied)
	if !x.ClearRank(rankA) {
		t.Fatal("ClearRank(live) = false")
	}
	if x.ClearRank(rankC) {
		t.Fatal("ClearRank(not live) = true")
	}
	wantMatch(t, x, []uint64{1, 2}, map[Rank]uint32{rankB: 1})
	// The cursor went too: a lower id is applied, not a replay.
	mustApply(t, x, rankA, storeEv(rankA, 1, blocks(10, 1)), Applied)
	wantSize(t, x, 1, 2)
}

func TestCeilings(t *testing.T) {
	cases := []struct {
		name string
		lim  limits
		run  func(t *testing.T, x *Index)
	}{
		{"nodes", limits{nodes: 3, perRank: 100, ownerships: 100, ownersPerNode: 100, ranks: 10}, func(t *testing.T, x *Index) {
			mustApply(t, x, rankA, storeEv(rankA, 0, blocks(10, 1, 2, 3, 4, 5)), OverCapacity)
			wantMatch(t, x, []uint64{1, 2, 3, 4, 5}, map[Rank]uint32{rankA: 3})     // the chain's prefix stays
			mustApply(t, x, rankB, storeEv(rankB, 0, blocks(20, 1, 2, 3)), Applied) // existing nodes
			mustApply(t, x, rankB, storeEv(rankB, 0, blocks(30, 7)), OverCapacity)
			wantSize(t, x, 3, 6)
		}},
		{"blocks per rank", limits{nodes: 100, perRank: 2, ownerships: 100, ownersPerNode: 100, ranks: 10}, func(t *testing.T, x *Index) {
			mustApply(t, x, rankA, storeEv(rankA, 0, blocks(10, 1, 2, 3)), OverCapacity)
			wantMatch(t, x, []uint64{1, 2, 3}, map[Rank]uint32{rankA: 2})
			mustApply(t, x, rankA, storeEv(rankA, 0, blocks(10, 1, 2)), Applied) // held already
			// A held engine hash may name another node: no new block.
			mustApply(t, x, rankA, storeEv(rankA, 0, []StoredBlock{{BlockHash: 12, TokensHash: 9}}), Applied)
			mustApply(t, x, rankB, storeEv(rankB, 0, blocks(20, 1, 2)), Applied) // per rank
			wantSize(t, x, 3, 4)
		}},
		{"ownerships", limits{nodes: 100, perRank: 100, ownerships: 3, ownersPerNode: 100, ranks: 10}, func(t *testing.T, x *Index) {
			mustApply(t, x, rankA, storeEv(rankA, 0, blocks(10, 1, 2)), Applied)
			mustApply(t, x, rankB, storeEv(rankB, 0, blocks(20, 1, 2)), OverCapacity)
			wantMatch(t, x, []uint64{1, 2}, map[Rank]uint32{rankA: 2, rankB: 1})
			mustApply(t, x, rankA, removeEv(rankA, 0, 12), Applied) // room again
			mustApply(t, x, rankB, storeUnder(rankB, 0, 21, blocks(22, 2)), Applied)
			wantSize(t, x, 2, 3)
		}},
		{"owners per node", limits{nodes: 100, perRank: 100, ownerships: 100, ownersPerNode: 2, ranks: 10}, func(t *testing.T, x *Index) {
			mustApply(t, x, rankA, storeEv(rankA, 0, blocks(10, 1)), Applied)
			mustApply(t, x, rankB, storeEv(rankB, 0, blocks(20, 1)), Applied)
			mustApply(t, x, rankC, storeEv(rankC, 0, blocks(30, 1, 2)), OverCapacity)
			mustApply(t, x, rankC, storeEv(rankC, 0, blocks(30, 5)), Applied) // another node
			// An owner storing the node again under another engine hash
			// is not a new owner.
			mustApply(t, x, rankA, storeEv(rankA, 0, blocks(40, 1)), Applied)
			wantMatch(t, x, []uint64{1}, map[Rank]uint32{rankA: 1, rankB: 1})
			wantSize(t, x, 2, 4)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, liveIndex(t, c.lim, rankA, rankB, rankC)) })
	}
}

// The compiled-in values, at full size.
func TestRealOwnersPerNodeCeiling(t *testing.T) {
	ranks := make([]Rank, MaxOwnersPerNode+1)
	for i := range ranks {
		ranks[i] = Rank{"dyn", uint64(i) + 1, 0}
	}
	x := liveIndex(t, defaultLimits, ranks...)
	for i, r := range ranks {
		want := Applied
		if i == MaxOwnersPerNode {
			want = OverCapacity
		}
		if got := x.Apply("dyn", storeEv(r, 0, blocks(0, 42))); got != want {
			t.Fatalf("rank %d: %v, want %v", i, got, want)
		}
	}
	var out Matches
	x.FindMatches([]uint64{42}, &out)
	if out.Len() != MaxOwnersPerNode {
		t.Fatalf("%d ranks match, want %d", out.Len(), MaxOwnersPerNode)
	}
}

func TestRealBlocksPerRankCeiling(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA)
	const chain = 8192
	bs := make([]StoredBlock, chain)
	for c := range MaxBlocksPerRank / chain {
		for i := range bs {
			n := uint64(c*chain + i)
			bs[i] = StoredBlock{BlockHash: n + 1, TokensHash: n<<1 | 1}
		}
		if got := x.Apply("dyn", storeEv(rankA, 0, bs)); got != Applied {
			t.Fatalf("chain %d: %v", c, got)
		}
	}
	if got := x.Apply("dyn", storeEv(rankA, 0, []StoredBlock{{BlockHash: 1 << 40, TokensHash: 2}})); got != OverCapacity {
		t.Fatalf("block %d: %v, want over_capacity", MaxBlocksPerRank+1, got)
	}
	wantSize(t, x, MaxBlocksPerRank, MaxBlocksPerRank)
	x.ClearRank(rankA)
	wantSize(t, x, 0, 0)
}

func TestFindMatchesAllocatesNothing(t *testing.T) {
	ranks := make([]Rank, 64)
	for i := range ranks {
		ranks[i] = Rank{"dyn", uint64(i) + 1, 0}
	}
	x := liveIndex(t, defaultLimits, ranks...)
	prompt := make([]uint64, 128)
	for i := range prompt {
		prompt[i] = uint64(i) + 1
	}
	for i, r := range ranks {
		x.Apply("dyn", storeEv(r, 0, blocks(0, prompt[:1+i*2%len(prompt)]...)))
	}
	var out Matches
	x.FindMatches(prompt, &out) // grows the buffers
	if allocs := testing.AllocsPerRun(100, func() { x.FindMatches(prompt, &out) }); allocs != 0 {
		t.Fatalf("FindMatches allocates %.1f times per call", allocs)
	}
	if out.Len() != 64 {
		t.Fatalf("%d ranks matched", out.Len())
	}
}

func TestResults(t *testing.T) {
	want := []string{"applied", "replay", "gap", "over_capacity", "identity_mismatch", "other_tier",
		"parent_not_found", "unknown_block", "malformed"}
	var got []string
	for _, r := range Results() {
		got = append(got, r.String())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Results() = %v, want %v", got, want)
	}
	if s := Result(200).String(); s != "unknown" {
		t.Fatalf("out of range: %q", s)
	}
}

func TestStatsSortedByRank(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankC, Rank{"b", 5, 1}, rankA, Rank{"b", 5, 0})
	mustApply(t, x, rankC, storeEv(rankC, 4, blocks(10, 1, 2)), Applied)
	st := x.Stats()
	var order []Rank
	for _, r := range st.Ranks {
		order = append(order, r.Rank)
	}
	if want := []Rank{{"b", 5, 0}, {"b", 5, 1}, rankA, rankC}; !slices.Equal(order, want) {
		t.Fatalf("Stats ranks %v, want %v", order, want)
	}
	if c := st.Ranks[3]; c.Blocks != 2 || c.Cursor != 4 || !c.HasCursor {
		t.Fatalf("C's stats: %+v", c)
	}
}

// Memory follows what is held: a rank that filled up and then removed
// nearly everything does not keep its peak's map or owner arrays.
func TestRemovalReleasesMemory(t *testing.T) {
	ranks := benchRanks(MaxOwnersPerNode)
	x := liveIndex(t, defaultLimits, ranks...)
	const n = 1 << 16
	bs := make([]StoredBlock, n)
	for i := range bs {
		bs[i] = StoredBlock{BlockHash: uint64(i) + 1, TokensHash: uint64(i)}
	}
	r := ranks[0]
	mustApply(t, x, r, storeEv(r, 0, bs), Applied)
	// Every rank on the first node: its owner array grows to 4096.
	for _, o := range ranks[1:] {
		if res := x.Apply(o.Namespace, storeEv(o, 0, bs[:1])); res != Applied {
			t.Fatal(res)
		}
	}
	heapBefore := heapInUse()
	hs := make([]uint64, 0, n)
	for i := n - 1; i >= 1; i-- { // leaves first, keep the root block
		hs = append(hs, bs[i].BlockHash)
	}
	mustApply(t, x, r, removeEv(r, 0, hs...), Applied)
	for _, o := range ranks[1:] {
		if res := x.Apply(o.Namespace, removeEv(o, 0, bs[0].BlockHash)); res != Applied {
			t.Fatal(res)
		}
	}
	if err := checkIndex(x); err != nil {
		t.Fatal(err)
	}
	rs := &x.slots[x.ranks[r]]
	if len(rs.blocks) != 1 || rs.peak != 1 {
		t.Fatalf("rank map not rebuilt: %d blocks, peak %d", len(rs.blocks), rs.peak)
	}
	root := x.nodes[0].first
	if c := cap(x.nodes[root].owners); c >= minShrinkOwners {
		t.Fatalf("owner array of 1 keeps capacity %d", c)
	}
	if freed := heapBefore - heapInUse(); freed < 1<<20 { // the map alone is about 3 MiB
		t.Fatalf("removing 65,535 blocks released %d bytes", freed)
	}
	wantSize(t, x, 1, 1)
}
