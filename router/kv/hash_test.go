package kv

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

// Vectors from dynamo-wire.md §5 (Dynamo's own test) and §10 (derived).
func TestDynamoVectors(t *testing.T) {
	if got := xxh3.HashSeed([]byte("test data"), BaseSeed); got != 13226331709069118873 {
		t.Fatalf("compute_block_hash(test data) = %d", got)
	}
	four := []uint32{0, 1, 2, 3}
	cases := []struct {
		name, lora, salt string
		seed, hash       uint64
	}{
		{"base", "", "", 1337, 9143094415614847814},
		{"lora", "adapter-a", "", 8842669519798868182, 6665157333201000639},
		{"salt", "", "tenant-a", 1948188790972764086, 17009624042690211646},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seed := Seed(c.lora, c.salt)
			if seed != c.seed {
				t.Fatalf("seed = %d, want %d", seed, c.seed)
			}
			if got := BlockHashes(four, 4, seed); !slices.Equal(got, []uint64{c.hash}) {
				t.Fatalf("hashes = %v, want [%d]", got, c.hash)
			}
		})
	}
}

func TestEightTokensChain(t *testing.T) {
	toks := []uint32{0, 1, 2, 3, 4, 5, 6, 7}
	local := BlockHashes(toks, 4, Seed("", ""))
	if want := []uint64{9143094415614847814, 12124091508212882195}; !slices.Equal(local, want) {
		t.Fatalf("local = %v, want %v", local, want)
	}
	seq := SequenceHashes(local)
	if want := []uint64{9143094415614847814, 9510318385840434533}; !slices.Equal(seq, want) {
		t.Fatalf("seq = %v, want %v", seq, want)
	}
}

// Dynamo's block-count tests: bs → 1, bs+1 → 1, 2bs+1 → 2.
func TestPartialBlocksDropped(t *testing.T) {
	for _, bs := range []int{11, 32, 64} {
		for _, c := range []struct{ n, want int }{{bs - 1, 0}, {bs, 1}, {bs + 1, 1}, {2*bs + 1, 2}} {
			toks := make([]uint32, c.n)
			if got := len(BlockHashes(toks, bs, BaseSeed)); got != c.want {
				t.Errorf("bs=%d len=%d: %d hashes, want %d", bs, c.n, got, c.want)
			}
		}
	}
	if BlockHashes([]uint32{1, 2}, 0, BaseSeed) != nil {
		t.Error("block size 0 must yield nil")
	}
	if SequenceHashes(nil) != nil {
		t.Error("empty chain must be nil")
	}
}

func TestEmptyStringsAreAbsent(t *testing.T) {
	if Seed("", "") != BaseSeed {
		t.Fatal("empty lora and salt must leave the base seed")
	}
	if Seed("a", "") == Seed("", "a") {
		t.Fatal("lora and salt must perturb the seed differently")
	}
}

// reference hashes one block at a time through a fresh buffer, the
// obvious way, to check the scratch-buffer version against.
func reference(tokens []uint32, bs int, seed uint64) []uint64 {
	var out []uint64
	for i := 0; i+bs <= len(tokens); i += bs {
		var b []byte
		for _, t := range tokens[i : i+bs] {
			b = binary.LittleEndian.AppendUint32(b, t)
		}
		out = append(out, xxh3.HashSeed(b, seed))
	}
	return out
}

func FuzzBlockHashes(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0}, uint8(1), uint64(1337))
	f.Add([]byte("abcdefghijklmnopq"), uint8(3), uint64(0))
	f.Fuzz(func(t *testing.T, raw []byte, bs uint8, seed uint64) {
		if bs == 0 {
			return
		}
		toks := make([]uint32, len(raw)/4)
		for i := range toks {
			toks[i] = binary.LittleEndian.Uint32(raw[4*i:])
		}
		got := BlockHashes(toks, int(bs), seed)
		if want := reference(toks, int(bs), seed); !slices.Equal(got, want) {
			t.Fatalf("BlockHashes = %v, reference %v", got, want)
		}
		seq := SequenceHashes(got)
		if len(seq) != len(got) || (len(seq) > 0 && seq[0] != got[0]) {
			t.Fatalf("bad chain %v for %v", seq, got)
		}
		// A prefix's chain is a prefix of the whole chain.
		if len(got) > 1 && !slices.Equal(SequenceHashes(got[:len(got)-1]), seq[:len(seq)-1]) {
			t.Fatal("chain is not prefix-stable")
		}
	})
}

func BenchmarkBlockHashes(b *testing.B) {
	toks := make([]uint32, 8192)
	for i := range toks {
		toks[i] = uint32(i * 7919)
	}
	b.SetBytes(int64(4 * len(toks)))
	b.ReportAllocs()
	for b.Loop() {
		SequenceHashes(BlockHashes(toks, 64, BaseSeed))
	}
}

func TestAppendBlockHashesEqualsBlockHashes(t *testing.T) {
	tokens := make([]uint32, 1000)
	for i := range tokens {
		tokens[i] = uint32(i*7919) ^ 0xdeadbeef
	}
	for _, bs := range []int{1, 16, 64, 333, 1000, 1001} {
		want := BlockHashes(tokens, bs, Seed("lora", "salt"))
		got := AppendBlockHashes([]uint64{42}, tokens, bs, Seed("lora", "salt"))
		if len(got) != len(want)+1 || got[0] != 42 {
			t.Fatalf("bs %d: %d hashes, want %d after the prefix", bs, len(got), len(want)+1)
		}
		for i := range want {
			if got[i+1] != want[i] {
				t.Fatalf("bs %d block %d: %x != %x", bs, i, got[i+1], want[i])
			}
		}
	}
}
