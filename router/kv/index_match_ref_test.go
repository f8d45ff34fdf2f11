package kv

import "slices"

// mergeMatcher is the previous FindMatches, kept as a test-only baseline:
// it keeps the still-matching slots and merges them with each node's
// owners, O(depth × ranks still matching). Tests check the walk against
// it, order included, and benchmarks measure the two side by side.
type mergeMatcher struct {
	active []uint32
}

func (mm *mergeMatcher) findMatches(x *Index, hashes []uint64, out *Matches) {
	out.Ranks, out.Blocks = out.Ranks[:0], out.Blocks[:0]
	active := mm.active[:0]
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
		} else if !slices.Equal(active, owners) {
			active = mergeKeep(x, active, owners, matched, out)
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
	mm.active = active[:0]
}

// mergeKeep filters the ascending slots in active down to those among the
// ascending owners, in place; the ones dropped score `score`.
func mergeKeep(x *Index, active, owners []uint32, score uint32, out *Matches) []uint32 {
	w, j := 0, 0
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
