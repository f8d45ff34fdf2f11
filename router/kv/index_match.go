package kv

import "slices"

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

// FindMatches walks the radix tree from the root along a prompt's block
// hashes (BlockHashes: the router's LocalBlockHash of each complete block)
// and writes each rank's longest contiguous prefix match into out. A rank
// owning blocks 0, 1 and 3 of the prompt scores 2.
//
// Results come in increasing score, ties in the index's internal rank
// order; that order is a function of the sequence of calls, never of map
// iteration. Cost: one child lookup per matched depth plus a merge of the
// still-matching ranks with each node's sorted owner list, so
// O(depth × ranks still matching) and no allocation in steady state.
func (x *Index) FindMatches(hashes []uint64, out *Matches) {
	out.Ranks, out.Blocks = out.Ranks[:0], out.Blocks[:0]
	active := x.active[:0]
	cur := int32(0)
	var matched uint32
	for _, h := range hashes {
		child, ok := x.child(cur, h)
		if !ok {
			break
		}
		owners := x.nodes[child].owners
		if matched == 0 {
			active = append(active, owners...)
		} else if !slices.Equal(active, owners) { // equal: nobody drops out
			active = x.keep(active, owners, matched, out)
		}
		if len(active) == 0 {
			break
		}
		matched++
		cur = child
	}
	for _, s := range active {
		out.add(x.slots[s].rank, matched)
	}
	x.active = active[:0]
}

// keep filters the ascending slots in active down to those among the
// ascending owners, in place; the ones dropped score `score`.
func (x *Index) keep(active, owners []uint32, score uint32, out *Matches) []uint32 {
	w, j := 0, 0
	// Far more owners than candidates: binary-search each candidate in the
	// rest of the owners instead of stepping through them.
	search := len(owners) > 8*len(active)
	for _, s := range active {
		if search {
			lo, hi := j, len(owners)
			for lo < hi {
				m := int(uint(lo+hi) >> 1)
				if owners[m] < s {
					lo = m + 1
				} else {
					hi = m
				}
			}
			j = lo
		} else {
			for j < len(owners) && owners[j] < s {
				j++
			}
		}
		if j < len(owners) && owners[j] == s {
			active[w] = s
			w++
			j++
		} else {
			out.add(x.slots[s].rank, score)
		}
	}
	return active[:w]
}
