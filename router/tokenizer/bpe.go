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
	// merges maps a pair of ids to its rank and merged id.
	merges *pairTable
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
// A symbol merged into its left neighbour is marked gone. pairRank and
// pairMerged describe the pair the symbol starts with its right neighbour
// (pairRank noPair when that pair has no merge), kept current as the word
// changes, so a candidate taken from the queue is checked and merged
// without looking the pair up again.
type symbol struct {
	id         uint32
	prev, next int32
	pairRank   uint32
	pairMerged uint32
	gone       bool
}

// noPair is the pairRank of a symbol whose pair has no merge: ranks are
// bounded by MaxMerges, far below it.
const noPair = ^uint32(0)

// longWordBytes is the length from which a word is merged with rank
// queues (bpelong.go) rather than one heap of every candidate: both take
// the merges in the same order, but a long word's heap grows to one entry
// per byte and each pop costs a walk down it.
const longWordBytes = 256

type bpeScratch struct {
	symbols []symbol
	heap    candidateHeap
	queues  rankQueues
	runs    []tokenRun
}

// merge applies the merges to word, lowest rank first and, within a rank,
// leftmost first, as Hugging Face's library does.
func (m *bpeModel) merge(dst []uint32, word string) []uint32 {
	sc, _ := m.scratch.Get().(*bpeScratch)
	if sc == nil {
		sc = &bpeScratch{}
	}
	defer m.scratch.Put(sc)
	if len(word) >= longWordBytes && isOneByteRepeated(word) {
		if out, ok := m.mergeRepeatedByte(dst, word[0], len(word), sc); ok {
			return out
		}
	}
	syms := m.symbolsOf(sc.symbols[:0], word)
	if len(word) >= longWordBytes {
		m.mergeByRankQueues(syms, &sc.queues)
	} else {
		m.mergeByHeap(syms, &sc.heap)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	sc.symbols = syms
	return dst
}

// symbolsOf appends one symbol per byte of word, linked in order.
func (m *bpeModel) symbolsOf(syms []symbol, word string) []symbol {
	for i := 0; i < len(word); i++ {
		syms = append(syms, symbol{id: m.byteIDs[word[i]], prev: int32(i) - 1, next: int32(i) + 1})
	}
	syms[len(syms)-1].next = -1
	return syms
}

// mergeByHeap keeps every possible merge in one binary heap ordered by
// (rank, position): each merge pushes at most two candidates, so a word of
// n bytes costs O(n log n). A candidate made stale by an earlier merge is
// recognised when taken and skipped.
func (m *bpeModel) mergeByHeap(syms []symbol, heap *candidateHeap) {
	h := (*heap)[:0]
	for i := range syms {
		if rank := m.pairOf(syms, int32(i)); rank != noPair {
			h = append(h, newCandidate(rank, int32(i)))
		}
	}
	h.init()
	for len(h) > 0 {
		c := h.pop()
		if !isCurrent(syms, c.pos(), c.rank()) {
			continue
		}
		prev, pos := m.mergeAt(syms, c.pos())
		if prev >= 0 && syms[prev].pairRank != noPair {
			h.push(newCandidate(syms[prev].pairRank, prev))
		}
		if syms[pos].pairRank != noPair {
			h.push(newCandidate(syms[pos].pairRank, pos))
		}
	}
	*heap = h
}

// pairOf looks up the pair the symbol at pos starts, records it in the
// symbol and returns its rank (noPair when it has no merge or no right
// neighbour).
func (m *bpeModel) pairOf(syms []symbol, pos int32) uint32 {
	s := &syms[pos]
	s.pairRank = noPair
	if s.next >= 0 {
		if rank, merged, ok := m.merges.get(s.id, syms[s.next].id); ok {
			s.pairRank, s.pairMerged = rank, merged
		}
	}
	return s.pairRank
}

// isCurrent reports whether the symbol at pos still starts the pair a
// candidate of this rank was pushed for. Ranks are unique per pair, and the
// pair starting at a position only ever grows, so a pair with the rank is
// the pushed pair: this is the library's check that the merged id is
// unchanged.
func isCurrent(syms []symbol, pos int32, rank uint32) bool {
	s := &syms[pos]
	return !s.gone && s.pairRank == rank
}

// mergeAt merges the symbol at pos with its right neighbour, looks up the
// two pairs that changed, and returns the merged symbol's left neighbour
// and position.
func (m *bpeModel) mergeAt(syms []symbol, pos int32) (prev, at int32) {
	left := &syms[pos]
	right := &syms[left.next]
	left.id = left.pairMerged
	right.gone = true
	left.next = right.next
	if right.next >= 0 {
		syms[right.next].prev = pos
	}
	m.pairOf(syms, pos)
	if left.prev >= 0 {
		m.pairOf(syms, left.prev)
	}
	return left.prev, pos
}

// candidate is a possible merge of the symbol at a position with its right
// neighbour, packed as rank<<32 | position so that ordering candidates is
// one integer comparison: lowest rank first, then leftmost.
type candidate uint64

func newCandidate(rank uint32, pos int32) candidate {
	return candidate(uint64(rank)<<32 | uint64(uint32(pos)))
}

func (c candidate) rank() uint32 { return uint32(c >> 32) }
func (c candidate) pos() int32   { return int32(uint32(c)) }

// candidateHeap is a binary min-heap of candidates.
type candidateHeap []candidate

// init orders a filled slice into a heap in linear time.
func (h candidateHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *candidateHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if s[parent] <= s[i] {
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
	s.down(0)
	*h = s
	return top
}

func (h candidateHeap) down(i int) {
	for {
		smallest, l := i, 2*i+1
		if l < len(h) && h[l] < h[smallest] {
			smallest = l
		}
		if r := l + 1; r < len(h) && h[r] < h[smallest] {
			smallest = r
		}
		if smallest == i {
			return
		}
		h[i], h[smallest] = h[smallest], h[i]
		i = smallest
	}
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
