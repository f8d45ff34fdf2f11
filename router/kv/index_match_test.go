package kv

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkMemos verifies that every edge difference the index would trust
// equals a fresh merge of the two owner lists, that a kept difference is
// no larger than the node's owners, and that the free list is consistent.
func checkMemos(x *Index) error {
	used := map[int32]int32{}
	kept, owners := 0, 0
	for i := 1; i < len(x.nodes); i++ {
		nd := &x.nodes[i]
		owners += len(nd.owners)
		if nd.changed > x.epoch || nd.memoAt > x.epoch {
			return fmt.Errorf("node %d stamped %d/%d, after the epoch %d", i, nd.changed, nd.memoAt, x.epoch)
		}
		if nd.parent < 0 {
			if nd.memo != 0 || nd.memoAt != 0 {
				return fmt.Errorf("freed node %d keeps memo %d at %d", i, nd.memo, nd.memoAt)
			}
			continue
		}
		if nd.memo > 0 {
			if int(nd.memo) >= len(x.diffs) {
				return fmt.Errorf("node %d names diff %d of %d", i, nd.memo, len(x.diffs))
			}
			if other, dup := used[nd.memo]; dup {
				return fmt.Errorf("diff %d shared by nodes %d and %d", nd.memo, other, i)
			}
			used[nd.memo] = int32(i)
		} else if nd.memo != 0 && nd.memo != noMemo {
			return fmt.Errorf("node %d: memo %d", i, nd.memo)
		}
		p := &x.nodes[nd.parent]
		if nd.memoAt == 0 || nd.memoAt < p.changed || nd.memoAt < nd.changed {
			continue // void: recomputed on the next walk
		}
		var drops, joins []uint32
		for _, s := range p.owners {
			if _, ok := findSlot(nd.owners, s); !ok {
				drops = append(drops, s)
			}
		}
		for _, s := range nd.owners {
			if _, ok := findSlot(p.owners, s); !ok {
				joins = append(joins, s)
			}
		}
		switch n := len(drops) + len(joins); {
		case nd.memo == 0 && n != 0:
			return fmt.Errorf("node %d: no difference kept, want drops %v joins %v", i, drops, joins)
		case nd.memo == noMemo && n <= len(nd.owners):
			return fmt.Errorf("node %d: difference %d+%d not kept for %d owners", i, len(drops), len(joins), len(nd.owners))
		case nd.memo > 0:
			e := &x.diffs[nd.memo]
			if n == 0 || int(e.split) > len(e.diff) || !slices.Equal(e.diff[:e.split], drops) || !slices.Equal(e.diff[e.split:], joins) {
				return fmt.Errorf("node %d: kept %v split %d, want drops %v joins %v", i, e.diff, e.split, drops, joins)
			}
			kept += len(e.diff)
		}
	}
	if kept > owners {
		return fmt.Errorf("differences keep %d slots, more than the %d ownerships of nodes", kept, owners)
	}
	for _, m := range x.freeDiffs {
		if _, ok := used[m]; ok || m <= 0 || int(m) >= len(x.diffs) {
			return fmt.Errorf("free diff %d is in use or out of range", m)
		}
	}
	if len(x.diffs) > 0 && len(used)+len(x.freeDiffs) != len(x.diffs)-1 {
		return fmt.Errorf("%d diffs in use and %d free of %d", len(used), len(x.freeDiffs), len(x.diffs)-1)
	}
	return nil
}

// agreeWithMerge runs FindMatches and the previous merge walk on prompt
// and requires the same answer in the same order.
func agreeWithMerge(x *Index, mm *mergeMatcher, prompt []uint64, out, want *Matches) error {
	x.FindMatches(prompt, out)
	mm.findMatches(x, prompt, want)
	if !slices.Equal(out.Ranks, want.Ranks) || !slices.Equal(out.Blocks, want.Blocks) {
		return fmt.Errorf("prompt %v: walk %v %v, merge %v %v", prompt, out.Ranks, out.Blocks, want.Ranks, want.Blocks)
	}
	return checkMemos(x)
}

// memoWorkload drives many ranks over a few shared trunks: chains from the
// root, removals of single blocks (holes), clears and departures, with
// queries along the trunks between the changes.
type memoWorkload struct {
	rnd    *rand.Rand
	ranks  []Rank
	trunks [][]uint64
	held   map[Rank][]uint64
}

func newMemoWorkload(seed uint64, nranks int) *memoWorkload {
	w := &memoWorkload{rnd: rand.New(rand.NewPCG(seed, 11)), held: map[Rank][]uint64{}}
	for i := range nranks {
		w.ranks = append(w.ranks, Rank{"ns", uint64(i) + 1, 0})
	}
	for range 3 {
		t := make([]uint64, 16)
		for i := range t {
			t[i] = uint64(w.rnd.IntN(3)) + 1
		}
		w.trunks = append(w.trunks, t)
	}
	return w
}

// prompt is a trunk's prefix with a short random tail.
func (w *memoWorkload) prompt() []uint64 {
	t := w.trunks[w.rnd.IntN(len(w.trunks))]
	p := slices.Clone(t[:w.rnd.IntN(len(t)+1)])
	for range w.rnd.IntN(3) {
		p = append(p, uint64(w.rnd.IntN(3))+1)
	}
	return p
}

func pathHash(path []uint64) uint64 {
	var h uint64 = 14695981039346656037
	for _, v := range path {
		h = (h ^ v) * 1099511628211
	}
	return h
}

func (w *memoWorkload) step(x *Index) {
	r := w.ranks[w.rnd.IntN(len(w.ranks))]
	switch k := w.rnd.IntN(100); {
	case k < 55:
		p := w.prompt()
		if len(p) == 0 {
			return
		}
		ev := Event{WorkerID: r.WorkerID, Kind: Stored}
		for i := range p {
			h := pathHash(p[:i+1])
			ev.Blocks = append(ev.Blocks, StoredBlock{BlockHash: h, TokensHash: p[i]})
			w.held[r] = append(w.held[r], h)
		}
		x.Apply(r.Namespace, &ev)
	case k < 93:
		if hs := w.held[r]; len(hs) > 0 {
			ev := Event{WorkerID: r.WorkerID, Kind: Removed, Removed: []uint64{hs[w.rnd.IntN(len(hs))]}}
			x.Apply(r.Namespace, &ev)
		}
	case k < 97:
		x.ClearRank(r)
		delete(w.held, r)
	default:
		live := slices.Clone(w.ranks)
		w.rnd.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
		live = live[:len(live)-w.rnd.IntN(4)]
		x.SetLive(slices.Values(live))
		for _, gone := range w.ranks {
			if !x.admits(gone) {
				delete(w.held, gone)
			}
		}
		x.SetLive(slices.Values(w.ranks)) // departed ranks return empty
	}
}

// The edge walk gives exactly the previous merge walk's answers, in the
// same order, while many ranks share trunks with holes and the owner sets
// change between queries; every memo trusted matches a fresh merge.
func TestFindMatchesAgreesWithMerge(t *testing.T) {
	seeds, steps := 40, 600
	if testing.Short() {
		seeds, steps = 8, 300
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		w := newMemoWorkload(seed, 120)
		x := liveIndex(t, defaultLimits, w.ranks...)
		var mm mergeMatcher
		var out, want Matches
		for step := range steps {
			w.step(x)
			for range 3 {
				if err := agreeWithMerge(x, &mm, w.prompt(), &out, &want); err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
			}
		}
		if err := checkIndex(x); err != nil {
			t.Fatal(err)
		}
	}
}

// The owner-change epoch and the per-query stamp are 32-bit counters:
// when either wraps, stale stamps are reset and answers stay right.
func TestFindMatchesCountersWrap(t *testing.T) {
	w := newMemoWorkload(3, 40)
	x := liveIndex(t, defaultLimits, w.ranks...)
	var mm mergeMatcher
	var out, want Matches
	for range 200 {
		w.step(x)
	}
	for range 20 {
		if err := agreeWithMerge(x, &mm, w.prompt(), &out, &want); err != nil {
			t.Fatal(err)
		}
	}
	// Jump both counters next to their end, keeping the recorded stamps
	// below them as they would be.
	for i := range x.nodes {
		x.nodes[i].changed, x.nodes[i].memoAt = min(x.nodes[i].changed, 1), 0
	}
	x.epoch = math.MaxUint32 - 5
	for i := range x.gone {
		x.gone[i] = min(x.gone[i], 1)
	}
	x.query = math.MaxUint32 - 2
	for step := range 300 {
		w.step(x)
		for range 2 {
			if err := agreeWithMerge(x, &mm, w.prompt(), &out, &want); err != nil {
				t.Fatalf("step %d (epoch %d, query %d): %v", step, x.epoch, x.query, err)
			}
		}
	}
	if x.epoch >= math.MaxUint32-5 || x.query >= math.MaxUint32-2 {
		t.Fatalf("counters did not wrap: epoch %d, query %d", x.epoch, x.query)
	}
}

// A rank that holds a block without its parent (a hole above it) joins
// the owners below the hole but never the candidates: it scores only its
// contiguous prefix, and ranks dropping out below it are still reported.
func TestFindMatchesRankJoiningBelowHole(t *testing.T) {
	x := liveIndex(t, defaultLimits, rankA, rankB, rankC)
	prompt := []uint64{10, 11, 12, 13}
	mustApply(t, x, rankA, storeEv(rankA, 0, blocks(0, prompt...)), Applied)
	mustApply(t, x, rankB, storeEv(rankB, 0, blocks(100, prompt[:3]...)), Applied)
	mustApply(t, x, rankC, storeEv(rankC, 0, blocks(200, prompt...)), Applied)
	mustApply(t, x, rankC, removeEv(rankC, 0, 202), Applied) // C: 10, _, 12, 13
	var mm mergeMatcher
	var out, want Matches
	for range 2 { // the second walk reads the memos
		if err := agreeWithMerge(x, &mm, prompt, &out, &want); err != nil {
			t.Fatal(err)
		}
		wantMatch(t, x, prompt, map[Rank]uint32{rankA: 4, rankB: 3, rankC: 1})
	}
	// B drops out at 13, below C's return: C must not take B's place.
	if got := []uint32{1, 3, 4}; !slices.Equal(out.Blocks, got) {
		t.Fatalf("scores %v, want %v", out.Blocks, got)
	}
	// Three edges differ (C leaves, C joins, B leaves) and are kept.
	if len(x.diffs)-1-len(x.freeDiffs) != 3 {
		t.Fatalf("%d differences kept, want 3", len(x.diffs)-1-len(x.freeDiffs))
	}
}

// An edge where most of the parent's owners stop is merged per walk, not
// memoised: memos never hold more slots than the nodes' owners.
func TestFindMatchesWideDropNotKept(t *testing.T) {
	ranks := benchRanks(50)
	x := liveIndex(t, defaultLimits, ranks...)
	for _, r := range ranks {
		mustApply(t, x, r, storeEv(r, 0, blocks(0, 1)), Applied)
	}
	mustApply(t, x, ranks[7], storeEv(ranks[7], 0, blocks(10, 1, 2)), Applied)
	var mm mergeMatcher
	var out, want Matches
	for range 2 {
		if err := agreeWithMerge(x, &mm, []uint64{1, 2}, &out, &want); err != nil {
			t.Fatal(err)
		}
	}
	n, _ := x.child(x.nodes[0].first, 2)
	if m := x.nodes[n].memo; m != noMemo || len(x.diffs) != 0 {
		t.Fatalf("wide drop kept: memo %d, %d diffs", m, len(x.diffs))
	}
	if out.Len() != 50 || out.Of(ranks[7]) != 2 || out.Of(ranks[8]) != 1 {
		t.Fatalf("matches %v %v", out.Ranks, out.Blocks)
	}
}
