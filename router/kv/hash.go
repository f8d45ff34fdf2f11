// Package kv holds the router's view of worker KV caches. This file is the
// block hashing that must agree bit for bit with Dynamo's router
// (dynamo-wire.md §5): a request is matched against the KV index by the
// hashes of its complete token blocks, so any divergence here silently
// turns every cache hit into a miss.
package kv

import (
	"encoding/binary"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// BaseSeed is Dynamo's XXH3_SEED: the seed of every base-model block hash
// and of the sequence-hash chain.
const BaseSeed uint64 = 1337

// Seed returns the per-request block-hash seed. LoRA adapters and cache
// salts perturb the seed (rather than the hashed bytes) so that identical
// prompts under different adapters or tenants never share cache entries.
// Empty strings count as absent, as in Dynamo.
func Seed(loraName, cacheSalt string) uint64 {
	seed := BaseSeed
	if loraName != "" {
		seed += xxh3.HashStringSeed(loraName, 0) // wrapping, like Rust's wrapping_add
	}
	if cacheSalt != "" {
		seed += xxh3.HashStringSeed(cacheSalt, 1)
	}
	return seed
}

// BlockHashes returns the LocalBlockHash of every complete block of tokens:
// XXH3-64 with seed over the block's tokens as little-endian u32 bytes. A
// trailing partial block is not hashed because the engine never caches it.
// A non-positive blockSize yields nil.
func BlockHashes(tokens []uint32, blockSize int, seed uint64) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	n := len(tokens) / blockSize
	if n == 0 {
		return nil
	}
	if littleEndian {
		return AppendBlockHashes(make([]uint64, 0, n), tokens, blockSize, seed)
	}
	out := make([]uint64, n)
	// One scratch buffer reused for every block keeps this at two
	// allocations regardless of prompt length.
	buf := make([]byte, 4*blockSize)
	for b := range n {
		block := tokens[b*blockSize : (b+1)*blockSize]
		for i, t := range block {
			binary.LittleEndian.PutUint32(buf[4*i:], t)
		}
		out[b] = xxh3.HashSeed(buf, seed)
	}
	return out
}

// AppendBlockHashes appends the LocalBlockHash of every complete block of
// tokens to dst, like BlockHashes, without allocating beyond dst's growth
// on little-endian machines (the token slice is hashed in place).
func AppendBlockHashes(dst []uint64, tokens []uint32, blockSize int, seed uint64) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	n := len(tokens) / blockSize
	if !littleEndian {
		return append(dst, BlockHashes(tokens, blockSize, seed)...)
	}
	for b := range n {
		block := tokens[b*blockSize : (b+1)*blockSize]
		raw := unsafe.Slice((*byte)(unsafe.Pointer(&block[0])), 4*blockSize)
		dst = append(dst, xxh3.HashSeed(raw, seed))
	}
	return dst
}

// littleEndian: u32 tokens in memory are already their wire bytes.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// SequenceHashes chains local block hashes into prefix-identifying hashes:
// seq[0] = local[0], seq[i] = XXH3(LE64(seq[i-1]) || LE64(local[i]), 1337).
// Two blocks share a sequence hash only if their whole prefixes match.
func SequenceHashes(local []uint64) []uint64 {
	if len(local) == 0 {
		return nil
	}
	return appendSequenceHashes(make([]uint64, 0, len(local)), local)
}

// appendSequenceHashes appends local's sequence hashes to dst.
func appendSequenceHashes(dst, local []uint64) []uint64 {
	var buf [16]byte
	for i, h := range local {
		if i == 0 {
			dst = append(dst, h)
			continue
		}
		binary.LittleEndian.PutUint64(buf[0:8], dst[len(dst)-1])
		binary.LittleEndian.PutUint64(buf[8:16], h)
		dst = append(dst, xxh3.HashSeed(buf[:], BaseSeed))
	}
	return dst
}
