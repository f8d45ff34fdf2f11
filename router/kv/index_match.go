package kv

import (
	"math"
	"slices"
)

// Matches is FindMatches' answer: parallel slices, Ranks[i] holds the
// first Blocks[i] blocks of the prompt contiguously from the start. Ranks
// holding none are absent. The caller owns a Matches and passes it to
// every call: the slices are truncated and refilled in place, so once they
// have grown to the fleet's size a query allocates nothing.
type Matches struct {
	Ranks  []Rank
	Blocks []uint32
}

// Len is the number of ranks with a match.
func (m *Matches) Len() int { return len(m.Ranks) }

// Of returns r's matched blocks (0 if r matched nothing). It scans.
func (m *Matches) Of(r Rank) uint32 {
	for i := range m.Ranks {
		if m.Ranks[i] == r {
			return m.Blocks[i]
		}
	}
	return 0
}

// Longest is the greatest match of any rank (0 if none).
func (m *Matches) Longest() uint32 {
	var best uint32
	for _, b := range m.Blocks {
		best = max(best, b)
	}
	return best
}

func (m *Matches) add(r Rank, blocks uint32) {
	m.Ranks = append(m.Ranks, r)
	m.Blocks = append(m.Blocks, blocks)
}

// Each node caches the difference between its owners and its parent's,
// the ranks that leave or join on the edge above it, as of epoch memoAt
// (0: never computed). The cache is valid while neither owner set has
// changed since. node.memo says where the difference is: 0, empty (the
// common case: every owner of the parent goes on, costing no memory);
// noMemo, larger than the node's owners and so merged per walk, which
// then costs no more than the ranks it reports, while keeping it could
// take more memory than the owners themselves; otherwise an index into
// Index.diffs.
const noMemo = -1

// edgeDiff is a kept difference: diff[:split] are the parent's owners the
// node lacks (the ranks that stop matching on this edge), diff[split:]
// the node's owners the parent lacks (ranks holding the block without its
// parent), each ascending.
type edgeDiff struct {
	split uint32
	diff  []uint32
}

// FindMatches walks the radix tree from the root along a prompt's block
// hashes (BlockHashes: the router's LocalBlockHash of each complete block)
// and writes each rank's longest contiguous prefix match into out. A rank
// owning blocks 0, 1 and 3 of the prompt scores 2.
//
// Results come in increasing score, ties in the index's internal rank
// order; that order is a function of the sequence of calls, never of map
// iteration. The candidates are never copied: they are the current node's
// owners less the few that own it without having matched down to it. Each
// edge reports only the ranks that leave or join there (see noMemo), so the
// cost is one child lookup per matched depth plus the ranks reported, not
// depth × ranks; an edge whose owners changed since it was last walked
// costs one merge of its two owner lists. No allocation in steady state.
func (x *Index) FindMatches(hashes []uint64, out *Matches) {
	out.Ranks, out.Blocks = out.Ranks[:0], out.Blocks[:0]
	if len(hashes) == 0 {
		return
	}
	cur, ok := x.child(0, hashes[0])
	if !ok || len(x.nodes[cur].owners) == 0 {
		return
	}
	q := x.nextQuery()
	// Owners of cur marked gone[s] == q are not candidates: they joined on
	// an edge below the first node, so they missed some block above.
	excluded := 0
	matched := uint32(1)
	for _, h := range hashes[1:] {
		child, ok := x.child(cur, h)
		if !ok {
			break
		}
		drops, joins := x.edgeDiff(cur, child)
		for _, s := range drops {
			if x.gone[s] == q {
				excluded--
			} else {
				out.add(x.slots[s].rank, matched)
			}
		}
		for _, s := range joins {
			x.gone[s] = q
		}
		excluded += len(joins)
		cur = child
		if len(x.nodes[cur].owners) == excluded {
			return // no candidate left
		}
		matched++
	}
	for _, s := range x.nodes[cur].owners {
		if x.gone[s] != q {
			out.add(x.slots[s].rank, matched)
		}
	}
}

// nextQuery returns a fresh stamp for gone; when the counter wraps, every
// stale stamp is cleared first.
func (x *Index) nextQuery() uint32 {
	x.query++
	if x.query == 0 {
		clear(x.gone)
		x.query = 1
	}
	return x.query
}

// edgeDiff returns the owners of parent p that child c lacks (drops) and
// those of c that p lacks (joins), ascending, from c's cache when it is
// still valid. The slices are the index's: valid until its next call.
func (x *Index) edgeDiff(p, c int32) (drops, joins []uint32) {
	pn, cn := &x.nodes[p], &x.nodes[c]
	if cn.memoAt != 0 && cn.memoAt >= pn.changed && cn.memoAt >= cn.changed {
		switch {
		case cn.memo == 0:
			return nil, nil
		case cn.memo == noMemo:
			return x.mergeDiff(pn.owners, cn.owners)
		}
		e := &x.diffs[cn.memo]
		return e.diff[:e.split], e.diff[e.split:]
	}
	cn.memoAt = x.epoch
	if slices.Equal(pn.owners, cn.owners) { // the common case, compared at memory speed
		x.dropDiff(cn)
		return nil, nil
	}
	drops, joins = x.mergeDiff(pn.owners, cn.owners)
	if len(drops)+len(joins) > len(cn.owners) {
		x.dropDiff(cn)
		cn.memo = noMemo
		return drops, joins
	}
	if cn.memo <= 0 {
		cn.memo = x.newDiff()
	}
	e := &x.diffs[cn.memo]
	e.split, e.diff = uint32(len(drops)), shrunk(append(append(e.diff[:0], drops...), joins...))
	return e.diff[:e.split], e.diff[e.split:]
}

// mergeDiff merges two ascending slot lists into the index's scratch:
// those only in a, and those only in b.
func (x *Index) mergeDiff(a, b []uint32) (onlyA, onlyB []uint32) {
	onlyA, onlyB = x.onlyA[:0], x.onlyB[:0]
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			i++
			j++
		case a[i] < b[j]:
			onlyA = append(onlyA, a[i])
			i++
		default:
			onlyB = append(onlyB, b[j])
			j++
		}
	}
	onlyA = append(onlyA, a[i:]...)
	onlyB = append(onlyB, b[j:]...)
	x.onlyA, x.onlyB = onlyA, onlyB
	return onlyA, onlyB
}

// shrunk returns s, or a copy sized to it when s keeps a large capacity
// mostly unused (the same rule as owner arrays).
func shrunk(s []uint32) []uint32 {
	if c := cap(s); c >= minShrinkOwners && len(s) < c/4 {
		if len(s) == 0 {
			return nil
		}
		return append([]uint32(nil), s...)
	}
	return s
}

func (x *Index) newDiff() int32 {
	if k := len(x.freeDiffs); k > 0 {
		m := x.freeDiffs[k-1]
		x.freeDiffs = x.freeDiffs[:k-1]
		return m
	}
	if len(x.diffs) == 0 {
		x.diffs = append(x.diffs, edgeDiff{}) // 0 means none
	}
	x.diffs = append(x.diffs, edgeDiff{})
	return int32(len(x.diffs) - 1)
}

// dropDiff frees node nd's kept difference, if any, keeping a small diff
// array for reuse.
func (x *Index) dropDiff(nd *node) {
	if nd.memo > 0 {
		e := &x.diffs[nd.memo]
		e.split = 0
		if cap(e.diff) >= minShrinkOwners {
			e.diff = nil
		} else {
			e.diff = e.diff[:0]
		}
		x.freeDiffs = append(x.freeDiffs, nd.memo)
	}
	nd.memo = 0
}

// ownersChanged stamps node nd's owner set as changed now, which voids the
// cached differences of the edge above it and of the edges below it. When
// the epoch would wrap, every stamp is reset first.
func (x *Index) ownersChanged(nd *node) {
	if x.epoch == math.MaxUint32 {
		for i := range x.nodes {
			x.nodes[i].changed, x.nodes[i].memoAt = 0, 0
		}
		x.epoch = 0
	}
	x.epoch++
	nd.changed = x.epoch
}
