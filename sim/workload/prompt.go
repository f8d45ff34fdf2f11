package workload

import (
	"slices"

	"switchyard/router/kv"
)

// TracePrompt is a trace line's prompt before its token ids exist: the 512-token block of each
// hash id in order, truncated or padded to Len tokens (what synthesize builds). A simulation that
// needs only the prompt's length and block hashes never materializes it: Mooncake prompts average
// 12,000 tokens, 48 KiB each.
type TracePrompt struct {
	HashIDs []uint64
	Len     int
	cache   *blockCache // shared by one trace's prompts; nil derives every block
}

// Tokens synthesizes the prompt's token ids.
func (p *TracePrompt) Tokens() []uint32 { return synthesize(p.HashIDs, p.Len) }

// AppendBlockHashes appends what kv.AppendBlockHashes(dst, p.Tokens(), blockSize, seed) would,
// generating the tokens a block at a time into a scratch buffer. When blockSize divides the
// trace's 512-token blocks, a hash id's block hashes are remembered, so a repeated id (a shared
// prefix) is not generated again.
func (p *TracePrompt) AppendBlockHashes(dst []uint64, blockSize int, seed uint64) []uint64 {
	if blockSize <= 0 || p.Len/blockSize == 0 {
		return dst
	}
	want := len(dst) + p.Len/blockSize
	dst = slices.Grow(dst, p.Len/blockSize)
	h := blockHasher{dst: dst, size: blockSize, seed: seed}
	var c *blockCache
	if TraceBlockTokens%blockSize == 0 {
		c = p.cache.forConfig(blockSize, seed)
	}
	var buf [TraceBlockTokens]uint32
	pos := 0
	for _, id := range p.HashIDs {
		if pos == p.Len {
			break
		}
		n := min(TraceBlockTokens, p.Len-pos)
		// Aligned sizes reach every hash id's block with nothing pending.
		if c != nil {
			if got, ok := c.get(id); ok {
				h.dst = append(h.dst, got[:n/blockSize]...)
				pos += n
				continue
			}
			if n == TraceBlockTokens {
				from := len(h.dst)
				fillTokens(buf[:], blockState(id))
				h.feed(buf[:])
				c.put(id, h.dst[from:])
				pos += n
				continue
			}
		}
		fillTokens(buf[:n], blockState(id))
		h.feed(buf[:n])
		pos += n
	}
	last := ^uint64(0) // as synthesize: no hash ids
	if len(p.HashIDs) > 0 {
		last = p.HashIDs[len(p.HashIDs)-1]
	}
	for pos < p.Len && len(h.dst) < want {
		n := min(TraceBlockTokens, p.Len-pos)
		for i := range n {
			buf[i] = padToken(last, pos+i)
		}
		h.feed(buf[:n])
		pos += n
	}
	return h.dst
}

// blockHasher hashes a token stream fed in pieces into complete blocks, as kv.AppendBlockHashes
// hashes one slice; pending holds the start of a block that spans pieces.
type blockHasher struct {
	dst     []uint64
	pending []uint32
	size    int
	seed    uint64
}

func (h *blockHasher) feed(toks []uint32) {
	for len(toks) > 0 {
		if len(h.pending) > 0 || len(toks) < h.size {
			if h.pending == nil {
				h.pending = make([]uint32, 0, h.size)
			}
			k := min(h.size-len(h.pending), len(toks))
			h.pending, toks = append(h.pending, toks[:k]...), toks[k:]
			if len(h.pending) == h.size {
				h.dst = kv.AppendBlockHashes(h.dst, h.pending, h.size, h.seed)
				h.pending = h.pending[:0]
			}
			continue
		}
		whole := len(toks) / h.size * h.size
		h.dst = kv.AppendBlockHashes(h.dst, toks[:whole], h.size, h.seed)
		toks = toks[whole:]
	}
}

// maxCachedHashes bounds a trace's remembered block hashes (8 bytes each): 32 MiB.
const maxCachedHashes = 1 << 22

// blockCache remembers the block hashes of whole hash-id blocks for one block size and seed
// (the first asked for; others are derived every time). Past its bound it stops remembering.
type blockCache struct {
	size   int
	seed   uint64
	at     map[uint64]int32 // hash id → offset of its hashes in hashes
	hashes []uint64
}

func (c *blockCache) forConfig(size int, seed uint64) *blockCache {
	switch {
	case c == nil:
		return nil
	case c.size == 0:
		c.size, c.seed, c.at = size, seed, map[uint64]int32{}
	case c.size != size || c.seed != seed:
		return nil
	}
	return c
}

func (c *blockCache) get(id uint64) ([]uint64, bool) {
	off, ok := c.at[id]
	if !ok {
		return nil, false
	}
	return c.hashes[off : int(off)+TraceBlockTokens/c.size], true
}

func (c *blockCache) put(id uint64, hashes []uint64) {
	if len(c.hashes)+len(hashes) > maxCachedHashes {
		return
	}
	c.at[id] = int32(len(c.hashes))
	c.hashes = append(c.hashes, hashes...)
}

// PromptLen is the prompt's length in tokens, whether its token ids exist or not.
func (r *Request) PromptLen() int {
	if r.Tokens == nil && r.Prompt != nil {
		return r.Prompt.Len
	}
	return len(r.Tokens)
}

// PromptTokens returns the prompt's token ids, synthesizing a deferred prompt once.
func (r *Request) PromptTokens() []uint32 {
	if r.Tokens == nil && r.Prompt != nil {
		r.Tokens = r.Prompt.Tokens()
	}
	return r.Tokens
}

// AppendBlockHashes appends the LocalBlockHash of every complete block of the prompt, as
// kv.AppendBlockHashes over its token ids, without synthesizing a deferred prompt.
func (r *Request) AppendBlockHashes(dst []uint64, blockSize int, seed uint64) []uint64 {
	if r.Tokens == nil && r.Prompt != nil {
		return r.Prompt.AppendBlockHashes(dst, blockSize, seed)
	}
	return kv.AppendBlockHashes(dst, r.Tokens, blockSize, seed)
}
