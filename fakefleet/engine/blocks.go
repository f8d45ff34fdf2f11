package engine

import "container/list"

// cachedBlock is a prompt block registered in the prefix cache. Blocks with
// refs == 0 stay cached (reusable by a later request) and sit in the LRU
// list until evicted to make room.
type cachedBlock struct {
	hash, tokensHash uint64
	refs             int
	lru              *list.Element // non-nil exactly when refs == 0
}

// pool is the KV block cache of one rank. Blocks are either free, private
// to one request (partial blocks and generated tokens, which have no
// hashes), or cached by block hash.
type pool struct {
	total int
	free  int // never-used or evicted blocks
	cache map[uint64]*cachedBlock
	lru   *list.List // of *cachedBlock with refs == 0, least recent first
	emit  func(KVEvent)
}

func newPool(total int, emit func(KVEvent)) *pool {
	return &pool{total: total, free: total, cache: map[uint64]*cachedBlock{}, lru: list.New(), emit: emit}
}

// available is how many blocks a take could obtain, evicting as needed.
func (p *pool) available() int { return p.free + p.lru.Len() }

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
	var removed []uint64
	for p.free < n {
		b := p.lru.Remove(p.lru.Front()).(*cachedBlock)
		delete(p.cache, b.hash)
		removed = append(removed, b.hash)
		p.free++
	}
	if removed != nil {
		p.emit(KVEvent{Kind: Removed, Removed: removed})
	}
	p.free -= n
	return true
}

// ref pins a cached block, pulling it out of the eviction order.
func (p *pool) ref(b *cachedBlock) {
	if b.refs == 0 {
		p.lru.Remove(b.lru)
		b.lru = nil
	}
	b.refs++
}

// unref releases a pin; the block stays cached as most recently used.
func (p *pool) unref(b *cachedBlock) {
	b.refs--
	if b.refs == 0 {
		b.lru = p.lru.PushBack(b)
	}
}

// insert registers a block the caller already holds (taken privately) as
// cached with one reference.
func (p *pool) insert(hash, tokensHash uint64) *cachedBlock {
	b := &cachedBlock{hash: hash, tokensHash: tokensHash, refs: 1}
	p.cache[hash] = b
	return b
}

// referenced counts blocks pinned by requests: private plus cached with
// refs > 0. Cached-but-free blocks count as free, as in vLLM's usage.
func (p *pool) referenced() int { return p.total - p.free - p.lru.Len() }
