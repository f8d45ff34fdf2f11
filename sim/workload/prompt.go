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
}

// Tokens synthesizes the prompt's token ids.
func (p *TracePrompt) Tokens() []uint32 { return synthesize(p.HashIDs, p.Len) }

// AppendBlockHashes appends what kv.AppendBlockHashes(dst, p.Tokens(), blockSize, seed) would,
// generating the tokens a hash id's block at a time into a scratch buffer. (Remembering each
// hash id's block hashes cost more in map lookups and growth than regenerating them: only a
// third of the Mooncake trace's hash ids repeat.)
func (p *TracePrompt) AppendBlockHashes(dst []uint64, blockSize int, seed uint64) []uint64 {
	if blockSize <= 0 || p.Len/blockSize == 0 {
		return dst
	}
	want := len(dst) + p.Len/blockSize
	dst = slices.Grow(dst, p.Len/blockSize)
	h := blockHasher{dst: dst, size: blockSize, seed: seed}
	var buf [TraceBlockTokens]uint32
	pos := 0
	for _, id := range p.HashIDs {
		if pos == p.Len {
			break
		}
		n := min(TraceBlockTokens, p.Len-pos)
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
