package tokenizer

import "math/bits"

// pairTable maps a pair of token ids to its merge: an open-addressing hash
// table with linear probing over one flat array. Merging looks a pair up
// once or more per merge, and a flat table of integers costs about half a
// Go map's lookup on the families' 150,000 to 280,000 merges.
type pairTable struct {
	slots []pairSlot
	shift uint // 64 - log2(len(slots)): the hash keeps its top bits
	count int
}

// pairSlot is one entry. emptyPair marks a free slot: ids are bounded far
// below 2^32-1 (Limits), so no real pair has that key.
type pairSlot struct {
	key   uint64 // left<<32 | right
	merge uint64 // rank<<32 | merged id
}

const emptyPair = ^uint64(0)

// minPairSlots is the size of an empty table.
const minPairSlots = 16

func newPairTable() *pairTable {
	t := &pairTable{}
	t.resize(minPairSlots)
	return t
}

func pairKey(left, right uint32) uint64 { return uint64(left)<<32 | uint64(right) }

// slot returns where key's probe sequence starts: Fibonacci hashing, so
// consecutive ids spread over the table.
func (t *pairTable) slot(key uint64) int {
	return int((key * 0x9E3779B97F4A7C15) >> t.shift)
}

// get returns the merge of a pair: its rank and merged id.
func (t *pairTable) get(left, right uint32) (rank, merged uint32, ok bool) {
	key := pairKey(left, right)
	mask := len(t.slots) - 1
	for i := t.slot(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == key {
			return uint32(s.merge >> 32), uint32(s.merge), true
		}
		if s.key == emptyPair {
			return 0, 0, false
		}
	}
}

// has reports whether a pair has a merge.
func (t *pairTable) has(left, right uint32) bool {
	_, _, ok := t.get(left, right)
	return ok
}

// put stores a pair's merge. The table stays at most half full, so a probe
// sequence is short and always meets a free slot.
func (t *pairTable) put(left, right, rank, merged uint32) {
	if 2*(t.count+1) > len(t.slots) {
		t.resize(2 * len(t.slots))
	}
	if t.insert(pairKey(left, right), uint64(rank)<<32|uint64(merged)) {
		t.count++
	}
}

// insert stores key in its slot and reports whether the key is new.
func (t *pairTable) insert(key, merge uint64) bool {
	mask := len(t.slots) - 1
	for i := t.slot(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == key {
			s.merge = merge
			return false
		}
		if s.key == emptyPair {
			*s = pairSlot{key: key, merge: merge}
			return true
		}
	}
}

func (t *pairTable) resize(size int) {
	old := t.slots
	t.slots = make([]pairSlot, size)
	for i := range t.slots {
		t.slots[i].key = emptyPair
	}
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	for _, s := range old {
		if s.key != emptyPair {
			t.insert(s.key, s.merge)
		}
	}
}
