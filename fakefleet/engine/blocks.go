package engine

// cachedBlock is a prompt block registered in the prefix cache. Blocks with
// refs == 0 stay cached (reusable by a later request) and sit in the LRU
// list until evicted to make room.
type cachedBlock struct {
	hash, tokensHash uint64
	refs             int32
	// prev and next link the LRU list through slab indices; they mean
	// something exactly when refs == 0.
	prev, next int32
}

// pool is the KV block cache of one rank. Blocks are either free, private
// to one request (partial blocks and generated tokens, which have no
// hashes), or cached by block hash.
//
// Cached blocks live in a slab addressed by int32 and the LRU list is
// threaded through it, so caching, pinning and evicting a block allocates
// nothing once the slab has grown, and the garbage collector has no
// pointers to follow in a pool of tens of thousands of blocks.
type pool struct {
	total int
	free  int // never-used or evicted blocks
	// slab holds the cached blocks; slot 0 is the LRU list's sentinel
	// (its next is the least recently released block, its prev the most).
	slab   []cachedBlock
	vacant []int32    // slab slots to reuse
	cache  blockIndex // block hash to slab slot
	lruLen int        // blocks with refs == 0
	emit   func(KVEvent)
}

func newPool(total int, emit func(KVEvent)) *pool {
	return &pool{total: total, free: total, slab: make([]cachedBlock, 1, 64), emit: emit}
}

// available is how many blocks a take could obtain, evicting as needed.
func (p *pool) available() int { return p.free + p.lruLen }

// lookup returns the slot of the cached block with this hash, or 0.
func (p *pool) lookup(hash uint64) int32 { return p.cache.get(hash, p.slab) }

// take reserves n blocks, evicting least recently released cached blocks
// first if the free list is short; evictions are reported as one Removed
// event. It reports false (and changes nothing) when n cannot be met.
func (p *pool) take(n int) bool {
	if n <= 0 {
		return true
	}
	if n > p.available() {
		return false
	}
	if p.free >= n {
		p.free -= n
		return true
	}
	// The event keeps its slice: hosts may hold events past the next step.
	removed := make([]uint64, 0, n-p.free)
	for p.free < n {
		removed = append(removed, p.evictOldest())
	}
	p.emit(KVEvent{Kind: Removed, Removed: removed})
	p.free -= n
	return true
}

// evictOldest uncaches the least recently released block, frees it and
// returns its hash. The LRU list must not be empty.
func (p *pool) evictOldest() uint64 {
	i := p.slab[0].next
	p.unlink(i)
	h := p.slab[i].hash
	p.cache.del(h, i)
	p.vacant = append(p.vacant, i)
	p.free++
	return h
}

// ref pins a cached block, pulling it out of the eviction order.
func (p *pool) ref(i int32) {
	b := &p.slab[i]
	if b.refs == 0 {
		p.unlink(i)
	}
	b.refs++
}

// unref releases a pin; the block stays cached as most recently used.
func (p *pool) unref(i int32) {
	b := &p.slab[i]
	b.refs--
	if b.refs == 0 {
		last := p.slab[0].prev
		b.prev, b.next = last, 0
		p.slab[last].next = i
		p.slab[0].prev = i
		p.lruLen++
	}
}

// unlink takes block i (refs == 0) out of the LRU list.
func (p *pool) unlink(i int32) {
	b := &p.slab[i]
	p.slab[b.prev].next = b.next
	p.slab[b.next].prev = b.prev
	b.prev, b.next = 0, 0
	p.lruLen--
}

// insert registers a block the caller already holds (taken privately) as
// cached with one reference, and returns its slot.
func (p *pool) insert(hash, tokensHash uint64) int32 {
	b := cachedBlock{hash: hash, tokensHash: tokensHash, refs: 1}
	var i int32
	if n := len(p.vacant); n > 0 {
		i = p.vacant[n-1]
		p.vacant = p.vacant[:n-1]
		p.slab[i] = b
	} else {
		i = int32(len(p.slab))
		p.slab = append(p.slab, b)
	}
	p.cache.put(hash, i)
	return i
}

// referenced counts blocks pinned by requests: private plus cached with
// refs > 0. Cached-but-free blocks count as free, as in vLLM's usage.
func (p *pool) referenced() int { return p.total - p.free - p.lruLen }
