package engine

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"switchyard/router/kv"
)

// A request whose host hands over the prompt's block hashes (and no token
// ids) runs exactly as the same request with its tokens: same outputs,
// same KV events, same statistics. Hashes for another block size are
// ignored and the tokens hashed instead.
func TestGivenPromptBlocksMatchTokens(t *testing.T) {
	const bs = 4
	rng := rand.New(rand.NewPCG(3, 4))
	prefixes := [][]uint32{tokens(40), tokens(23), {9, 9, 9, 9, 9, 9, 9, 9, 9, 9}}
	cfg := Config{BlockSize: bs, TotalKVBlocks: 48, MaxNumBatchedTokens: 32,
		Timing: Constant{Prefill: time.Millisecond, Step: time.Millisecond}}
	withTokens, withBlocks, otherSize := New(cfg), New(cfg), New(cfg)
	var a, b, c []Output
	at := t0
	for id := range uint64(60) {
		p := prefixes[rng.IntN(len(prefixes))]
		toks := append(append([]uint32(nil), p[:rng.IntN(len(p))]...), uint32(rng.IntN(50)), uint32(rng.IntN(50)))
		local := kv.BlockHashes(toks, bs, kv.BaseSeed)
		req := Request{ID: id, Tokens: toks, MaxTokens: 1 + rng.IntN(6), Imported: rng.IntN(3) * bs}
		given := req
		given.Tokens = nil
		given.Blocks = &PromptBlocks{BlockSize: bs, Len: len(toks), Local: local, Chained: kv.SequenceHashes(local)}
		other := req
		other.Blocks = &PromptBlocks{BlockSize: 2 * bs, Len: len(toks)}
		withTokens.Submit(req, at)
		withBlocks.Submit(given, at)
		otherSize.Submit(other, at)
		at = at.Add(time.Duration(rng.IntN(5)) * time.Millisecond)
		a = append(a, withTokens.Advance(at)...)
		b = append(b, withBlocks.Advance(at)...)
		c = append(c, otherSize.Advance(at)...)
	}
	a, b, c = append(a, runAll(withTokens)...), append(b, runAll(withBlocks)...), append(c, runAll(otherSize)...)
	if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(a, c) {
		t.Fatalf("outputs differ:\n%+v\n%+v\n%+v", a, b, c)
	}
	ea, eb, ec := withTokens.DrainKVEvents(), withBlocks.DrainKVEvents(), otherSize.DrainKVEvents()
	if len(ea) == 0 || !reflect.DeepEqual(ea, eb) || !reflect.DeepEqual(ea, ec) {
		t.Fatalf("events differ (%d, %d, %d)", len(ea), len(eb), len(ec))
	}
	if sa := withTokens.Stats(); sa != withBlocks.Stats() || sa != otherSize.Stats() || sa.CachedTokens == 0 {
		t.Fatalf("stats differ or nothing cached: %+v %+v", sa, withBlocks.Stats())
	}
}
