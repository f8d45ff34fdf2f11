package tokenizer

import (
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// maxCachedWordBytes bounds the words the cache keeps: most words are short,
// and a long one (a client's 64 KiB of one letter) would pin its memory.
const maxCachedWordBytes = 64

// bpeModel is the BPE model on raw bytes: the byte-level vocabulary's keys
// are turned back into the bytes they stand for at load, so encoding never
// maps bytes to runes and back.
type bpeModel struct {
	// vocab maps a word's raw bytes to its id (for ignore_merges).
	vocab map[string]uint32
	// byteIDs is the id of each single byte.
	byteIDs [256]uint32
	// merges maps a pair of ids (left<<32 | right) to rank<<32 | merged id.
	merges map[uint64]uint64
	// ignoreMerges looks a whole word up in the vocabulary before merging.
	ignoreMerges bool
	cache        *wordCache
	scratch      sync.Pool // *bpeScratch
}

// appendWord appends the ids of one pre-tokenized word.
func (m *bpeModel) appendWord(dst []uint32, word string) []uint32 {
	if len(word) == 1 {
		return append(dst, m.byteIDs[word[0]])
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, id)
		}
	}
	cacheable := m.cache != nil && len(word) <= maxCachedWordBytes
	var hash uint64
	if cacheable {
		hash = fnv1a(word)
		if ids, ok := m.cache.get(hash, word); ok {
			return append(dst, ids...)
		}
	}
	start := len(dst)
	dst = m.merge(dst, word)
	if cacheable {
		m.cache.put(hash, word, dst[start:])
	}
	return dst
}

// symbol is one part of a word being merged, linked to its neighbours.
// A symbol merged into its left neighbour is marked gone.
type symbol struct {
	id         uint32
	prev, next int32
	gone       bool
}

// candidate is a possible merge of the symbol at pos with its right
// neighbour. Candidates are taken lowest rank first, then leftmost, as
// Hugging Face's library takes them; a candidate made stale by an earlier
// merge is recognised when taken and skipped.
type candidate struct {
	rank   uint32
	pos    int32
	merged uint32
}

func (a candidate) before(b candidate) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

type bpeScratch struct {
	symbols []symbol
	heap    []candidate
}

// merge applies the merges to word by rank with a binary heap: each merge
// pushes at most two candidates, so a word of n bytes costs O(n log n).
func (m *bpeModel) merge(dst []uint32, word string) []uint32 {
	sc, _ := m.scratch.Get().(*bpeScratch)
	if sc == nil {
		sc = &bpeScratch{}
	}
	syms := sc.symbols[:0]
	for i := 0; i < len(word); i++ {
		syms = append(syms, symbol{id: m.byteIDs[word[i]], prev: int32(i) - 1, next: int32(i) + 1})
	}
	syms[len(syms)-1].next = -1
	h := candidateHeap(sc.heap[:0])
	for i := 0; i+1 < len(syms); i++ {
		if v, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(candidate{rank: uint32(v >> 32), pos: int32(i), merged: uint32(v)})
		}
	}
	for len(h) > 0 {
		top := h.pop()
		left := &syms[top.pos]
		if left.gone || left.next < 0 {
			continue
		}
		right := &syms[left.next]
		if v, ok := m.merges[pairKey(left.id, right.id)]; !ok || uint32(v) != top.merged {
			continue // stale: a neighbour changed since this candidate was pushed
		}
		left.id = top.merged
		right.gone = true
		left.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if left.prev >= 0 {
			if v, ok := m.merges[pairKey(syms[left.prev].id, left.id)]; ok {
				h.push(candidate{rank: uint32(v >> 32), pos: left.prev, merged: uint32(v)})
			}
		}
		if left.next >= 0 {
			if v, ok := m.merges[pairKey(left.id, syms[left.next].id)]; ok {
				h.push(candidate{rank: uint32(v >> 32), pos: top.pos, merged: uint32(v)})
			}
		}
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	sc.symbols, sc.heap = syms, h
	m.scratch.Put(sc)
	return dst
}

func pairKey(left, right uint32) uint64 { return uint64(left)<<32 | uint64(right) }

// candidateHeap is a binary min-heap by candidate.before.
type candidateHeap []candidate

func (h *candidateHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s[i].before(s[parent]) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *candidateHeap) pop() candidate {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		smallest, l, r := i, 2*i+1, 2*i+2
		if l < len(s) && s[l].before(s[smallest]) {
			smallest = l
		}
		if r < len(s) && s[r].before(s[smallest]) {
			smallest = r
		}
		if smallest == i {
			break
		}
		s[i], s[smallest] = s[smallest], s[i]
		i = smallest
	}
	*h = s
	return top
}

// wordCache is a fixed-size, direct-mapped cache from a word to its ids.
// Each slot holds an immutable entry behind an atomic pointer, so lookups
// take no lock and a racing store simply replaces the entry; its memory is
// bounded by the slot count times maxCachedWordBytes.
type wordCache struct {
	slots []atomic.Pointer[cacheEntry]
	mask  uint64
}

type cacheEntry struct {
	word string
	ids  []uint32
}

// newWordCache returns a cache of at least entries slots (a power of two),
// or nil for a non-positive count.
func newWordCache(entries int) *wordCache {
	if entries <= 0 {
		return nil
	}
	size := 1 << bits.Len(uint(entries-1))
	return &wordCache{slots: make([]atomic.Pointer[cacheEntry], size), mask: uint64(size - 1)}
}

func (c *wordCache) get(hash uint64, word string) ([]uint32, bool) {
	e := c.slots[hash&c.mask].Load()
	if e == nil || e.word != word {
		return nil, false
	}
	return e.ids, true
}

func (c *wordCache) put(hash uint64, word string, ids []uint32) {
	c.slots[hash&c.mask].Store(&cacheEntry{word: strings.Clone(word), ids: slices.Clone(ids)})
}

// fnv1a is the 64-bit FNV-1a hash: deterministic, and only a slot index;
// colliding words cost cache misses, never wrong ids.
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
