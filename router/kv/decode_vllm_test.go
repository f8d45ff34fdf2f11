package kv_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/router/kv"
)

const vllmWorker = 0xfeed

func vllmFrames(seq uint64, batch any) [][]byte {
	return [][]byte{[]byte("kv@10.0.0.7:5557@Qwen/Qwen3-0.6B"), binary.BigEndian.AppendUint64(nil, seq), decPack(batch)}
}

func vllmTokens(n int, from uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = from + uint32(i)*7919
	}
	return out
}

// vllmBlocks pairs engine hashes with the router's hashes of the tokens.
func vllmBlocks(hashes []uint64, tokens []uint32, bs int, seed uint64) []kv.StoredBlock {
	local := kv.BlockHashes(tokens, bs, seed)
	out := make([]kv.StoredBlock, len(hashes))
	for i := range hashes {
		out[i] = kv.StoredBlock{BlockHash: hashes[i], TokensHash: local[i]}
	}
	return out
}

// vllmSHA is a 32-byte hash as newer vLLM sends it, and its u64 fold.
func vllmSHA(label string) ([]byte, uint64) {
	h := sha256.Sum256([]byte(label))
	return h[:], binary.BigEndian.Uint64(h[24:])
}

func TestDecodeVLLMPositional(t *testing.T) {
	toks := vllmTokens(2*16+5, 1) // two complete blocks and a partial one
	batch := []any{1.25, []any{
		[]any{"BlockStored", []any{int64(-7), uint64(1 << 63)}, nil, toks, 16, nil, "GPU"},
		[]any{"BlockStored", []any{9}, int64(-7), toks[:16], 16, nil, "CPU_PINNED"},
		[]any{"BlockRemoved", []any{int64(-7), 9}, "GPU"},
		[]any{"BlockRemoved", []any{3}}, // medium omitted (a default)
		[]any{"AllBlocksCleared"},
		[]any{"BlockStored", []any{5}, nil, toks[:16], 16, nil}, // older vLLM: no medium
	}, 2}
	var b kv.VLLMBatch
	require.Equal(t, kv.DecodeOK, kv.DecodeVLLMBatch(vllmFrames(41, batch), vllmWorker, &b))
	require.Equal(t, uint64(41), b.Seq)
	require.Equal(t, uint32(2), b.DPRank)
	require.Equal(t, uint32(16), b.BlockSize)
	require.Equal(t, "kv@10.0.0.7:5557@Qwen/Qwen3-0.6B", string(b.Topic))
	require.Zero(t, b.Skipped)
	minus7 := uint64(1<<64 - 7)
	want := []kv.Event{
		{WorkerID: vllmWorker, DPRank: 2, Kind: kv.Stored, Blocks: vllmBlocks([]uint64{minus7, 1 << 63}, toks, 16, kv.BaseSeed)},
		{WorkerID: vllmWorker, DPRank: 2, Kind: kv.Stored, Tier: kv.TierHostPinned, ParentHash: minus7, HasParent: true,
			Blocks: vllmBlocks([]uint64{9}, toks[:16], 16, kv.BaseSeed)},
		{WorkerID: vllmWorker, DPRank: 2, Kind: kv.Removed, Removed: []uint64{minus7, 9}},
		{WorkerID: vllmWorker, DPRank: 2, Kind: kv.Removed, Removed: []uint64{3}},
		{WorkerID: vllmWorker, DPRank: 2, Kind: kv.Cleared},
		{WorkerID: vllmWorker, DPRank: 2, Kind: kv.Stored, Blocks: vllmBlocks([]uint64{5}, toks[:16], 16, kv.BaseSeed)},
	}
	require.Len(t, b.Events, len(want))
	for i := range want {
		require.Equal(t, want[i], decNorm(b.Events[i]), "event %d", i)
	}
	// The tokens hashes are the router's own block hashes.
	require.Equal(t, kv.BlockHashes(toks, 16, kv.BaseSeed), []uint64{b.Events[0].Blocks[0].TokensHash, b.Events[0].Blocks[1].TokensHash})
}

// llm-d's consumers read a parent hash of 0 as no parent (their empty
// block hash), and llm-d-inference-sim's positional events write 0, not
// nil, for a sequence's first block: such a store starts a sequence.
func TestDecodeVLLMZeroParentIsNoParent(t *testing.T) {
	toks := vllmTokens(16, 3)
	batch := []any{1.0, []any{[]any{"BlockStored", []any{uint64(77)}, uint64(0), toks, 16, nil, "GPU"}}}
	var b kv.VLLMBatch
	require.Equal(t, kv.DecodeOK, kv.DecodeVLLMBatch(vllmFrames(1, batch), vllmWorker, &b))
	require.Len(t, b.Events, 1)
	require.Equal(t, kv.Event{WorkerID: vllmWorker, Kind: kv.Stored, Blocks: vllmBlocks([]uint64{77}, toks, 16, kv.BaseSeed)},
		decNorm(b.Events[0]))
}

// The named form (msgspec structs without array_like: the tag under
// "type", defaults omitted), with bytes hashes and a LoRA adapter.
func TestDecodeVLLMNamed(t *testing.T) {
	toks := vllmTokens(3*32, 100)
	h1, u1 := vllmSHA("one")
	h2, u2 := vllmSHA("two")
	h3, u3 := vllmSHA("three")
	hp, up := vllmSHA("parent")
	batch := decMap{{"ts", 1.5}, {"events", []any{
		decMap{{"type", "BlockStored"}, {"block_hashes", [][]byte{h1, h2, h3}}, {"parent_block_hash", hp}, {"token_ids", toks},
			{"block_size", 32}, {"lora_id", 3}, {"medium", "GPU"}, {"lora_name", "adapter-a"}, {"extra_keys", []any{nil, []any{"x"}, nil}}},
		decMap{{"block_hashes", [][]byte{h2}}, {"type", "BlockRemoved"}, {"medium", nil}, {"group_idx", 0}},
		decMap{{"type", "AllBlocksCleared"}},
	}}, {"data_parallel_rank", 1}}
	var b kv.VLLMBatch
	require.Equal(t, kv.DecodeOK, kv.DecodeVLLMBatch(vllmFrames(1, batch), vllmWorker, &b))
	seed := kv.Seed("adapter-a", "")
	require.Equal(t, []kv.Event{
		{WorkerID: vllmWorker, DPRank: 1, Kind: kv.Stored, ParentHash: up, HasParent: true, Blocks: vllmBlocks([]uint64{u1, u2, u3}, toks, 32, seed)},
		{WorkerID: vllmWorker, DPRank: 1, Kind: kv.Removed, Removed: []uint64{u2}},
		{WorkerID: vllmWorker, DPRank: 1, Kind: kv.Cleared},
	}, []kv.Event{decNorm(b.Events[0]), decNorm(b.Events[1]), decNorm(b.Events[2])})
	require.Len(t, b.Events, 3)
}

// Bytes hashes fold to the integer vLLM publishes for the same block
// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES): the same event decodes alike in
// both forms.
func TestDecodeVLLMBytesAndIntHashesAgree(t *testing.T) {
	toks := vllmTokens(16, 5)
	h, u := vllmSHA("block")
	short := []byte{0x01, 0x02, 0x03}
	var a, b kv.VLLMBatch
	require.Equal(t, kv.DecodeOK, kv.DecodeVLLMBatch(vllmFrames(1, []any{0.0, []any{
		[]any{"BlockStored", [][]byte{h}, short, toks, 16, nil, nil},
	}}), 1, &a))
	require.Equal(t, kv.DecodeOK, kv.DecodeVLLMBatch(vllmFrames(1, []any{0.0, []any{
		[]any{"BlockStored", []any{decUint(u)}, 0x010203, toks, 16, nil, nil},
	}}), 1, &b))
	require.Equal(t, a.Events, b.Events)
	require.Equal(t, u, a.Events[0].Blocks[0].BlockHash)
	require.Equal(t, uint64(0x010203), a.Events[0].ParentHash)
}

// SGLang's salted stores carry trailing metadata {cache_salt}; the salt
// seeds the hashes as the router seeds a salted request's.
func TestDecodeVLLMSaltedStore(t *testing.T) {
	toks := vllmTokens(16, 9)
	meta := decMap{{"cache_salt", "tenant-a"}, {"later", 1}}
	positional := []any{0.0, []any{[]any{"BlockStored", []any{1}, nil, toks, 16, nil, "GPU", meta}}}
	named := []any{0.0, []any{decMap{{"type", "BlockStored"}, {"block_hashes", []any{1}}, {"parent_block_hash", nil},
		{"token_ids", toks}, {"block_size", 16}, {"lora_id", nil}, {"medium", "GPU"}, {"metadata", meta}}}}
	for _, batch := range []any{positional, named} {
		var b kv.VLLMBatch
		require.Equal(t, kv.DecodeOK, kv.DecodeVLLMBatch(vllmFrames(1, batch), 1, &b))
		require.Equal(t, kv.BlockHashes(toks, 16, kv.Seed("", "tenant-a"))[0], b.Events[0].Blocks[0].TokensHash)
	}
	bad := []any{0.0, []any{[]any{"BlockStored", []any{1}, nil, toks, 16, nil, "GPU", decMap{{"cache_salt", 5}}}}}
	var b kv.VLLMBatch
	require.Equal(t, kv.DecodeMalformed, kv.DecodeVLLMBatch(vllmFrames(1, bad), 1, &b))
}

func TestDecodeVLLMSkips(t *testing.T) {
	toks := vllmTokens(16, 1)
	batch := []any{0.0, []any{
		[]any{"BlockStored", []any{1}, nil, toks, 16, nil, "GPU", nil, nil, 1}, // group 1 of a hybrid model
		[]any{"BlockRemoved", []any{1}, "GPU", 2},
		[]any{"BlockTransferred", []any{1}, "GPU", "CPU"}, // a type some engines add
		[]any{"BlockStored", []any{2}, nil, toks, 16, nil, "GPU", nil, nil, 0},
	}}
	var b kv.VLLMBatch
	require.Equal(t, kv.DecodeOK, kv.DecodeVLLMBatch(vllmFrames(1, batch), 1, &b))
	require.Equal(t, 3, b.Skipped)
	require.Len(t, b.Events, 1)
	require.Equal(t, uint64(2), b.Events[0].Blocks[0].BlockHash)
}

func TestDecodeVLLMRefusals(t *testing.T) {
	toks := vllmTokens(32, 1)
	stored := func(fields ...any) []any { return []any{0.0, []any{append([]any{"BlockStored"}, fields...)}} }
	cases := []struct {
		name  string
		batch any
		want  kv.DecodeResult
	}{
		{"more hashes than blocks", stored([]any{1, 2, 3}, nil, toks, 16, nil, nil), kv.DecodeMalformed},
		{"fewer hashes than blocks", stored([]any{1}, nil, toks, 16, nil, nil), kv.DecodeMalformed},
		{"block size 8", stored([]any{1, 2, 3, 4}, nil, toks, 8, nil, nil), kv.DecodeUnsupported},
		{"block size 65537", stored([]any{}, nil, []any{}, 65537, nil, nil), kv.DecodeUnsupported},
		{"a LoRA store without the adapter name", stored([]any{1, 2}, nil, toks, 16, 4, nil), kv.DecodeUnsupported},
		{"a LoRA store with an empty name", stored([]any{1, 2}, nil, toks, 16, 4, nil, ""), kv.DecodeUnsupported},
		{"an unknown medium", stored([]any{1, 2}, nil, toks, 16, nil, "VRAM"), kv.DecodeUnsupported},
		{"a token over u32", stored([]any{1}, nil, append(slices.Repeat([]any{1}, 15), uint64(1<<32)), 16, nil, nil), kv.DecodeMalformed},
		{"a negative token", stored([]any{1}, nil, append(slices.Repeat([]any{1}, 15), -1), 16, nil, nil), kv.DecodeMalformed},
		{"an empty bytes hash", stored([]any{[]byte{}, 2}, nil, toks, 16, nil, nil), kv.DecodeMalformed},
		{"a 65-byte hash", stored([]any{make([]byte, 65), 2}, nil, toks, 16, nil, nil), kv.DecodeMalformed},
		{"a string hash", stored([]any{"1", 2}, nil, toks, 16, nil, nil), kv.DecodeMalformed},
		{"no block size", stored([]any{1, 2}, nil, toks), kv.DecodeMalformed},
		{"a medium that is not a string", stored([]any{1, 2}, nil, toks, 16, nil, 1), kv.DecodeMalformed},
		{"a group that is not an integer", stored([]any{1, 2}, nil, toks, 16, nil, nil, nil, nil, "0"), kv.DecodeMalformed},
		{"too many hashes", []any{0.0, []any{[]any{"BlockRemoved", make([]uint64, kv.MaxBlocksPerEvent+1)}}}, kv.DecodeTooLarge},
		{"too many events", []any{0.0, slices.Repeat([]any{[]any{"AllBlocksCleared"}}, kv.MaxEventsPerBatch+1)}, kv.DecodeTooLarge},
		{"an event without a tag", []any{0.0, []any{[]any{}}}, kv.DecodeMalformed},
		{"a tag that is not a string", []any{0.0, []any{[]any{1}}}, kv.DecodeMalformed},
		{"a named event without a type", []any{0.0, []any{decMap{{"block_hashes", []any{}}}}}, kv.DecodeMalformed},
		{"a named event with a nil type", []any{0.0, []any{decMap{{"type", nil}}}}, kv.DecodeMalformed},
		{"no events", []any{0.0}, kv.DecodeMalformed},
		{"events not a list", []any{0.0, "x"}, kv.DecodeMalformed},
		{"dp rank over u32", []any{0.0, []any{}, uint64(1 << 32)}, kv.DecodeMalformed},
		{"a bare tag", "BlockStored", kv.DecodeMalformed},
		{"removed without hashes", []any{0.0, []any{[]any{"BlockRemoved"}}}, kv.DecodeMalformed},
		{"two block sizes in one batch", []any{0.0, []any{[]any{"BlockStored", []any{1}, nil, toks[:16], 16, nil}, []any{"BlockStored", []any{1}, nil, toks, 32, nil}}}, kv.DecodeUnsupported},
		{"first refusal wins", []any{0.0, []any{[]any{"BlockStored", []any{1}, nil, toks[:16], 8, nil}, []any{"BlockRemoved"}}}, kv.DecodeUnsupported},
	}
	b := kv.VLLMBatch{Events: make([]kv.Event, 0, 2)}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, kv.DecodeVLLMBatch(vllmFrames(1, c.batch), 1, &b))
			require.Empty(t, b.Events, "a refused batch yields nothing")
			require.Zero(t, b.BlockSize)
		})
	}
	// At the bounds.
	require.Equal(t, kv.DecodeOK, kv.DecodeVLLMBatch(vllmFrames(1, []any{0.0, slices.Repeat([]any{[]any{"AllBlocksCleared"}}, kv.MaxEventsPerBatch)}), 1, &b))
	require.Len(t, b.Events, kv.MaxEventsPerBatch)
	big := vllmTokens(65536, 0)
	require.Equal(t, kv.DecodeOK, kv.DecodeVLLMBatch(vllmFrames(1, []any{0.0, []any{[]any{"BlockStored", []any{1}, nil, big, 65536, nil, nil}}}), 1, &b))
	require.Equal(t, kv.BlockHashes(big, 65536, kv.BaseSeed)[0], b.Events[0].Blocks[0].TokensHash)

	// Framing.
	good := vllmFrames(1, []any{0.0, []any{}})
	require.Equal(t, kv.DecodeOK, kv.DecodeVLLMBatch(good, 1, &b))
	require.Equal(t, kv.DecodeMalformed, kv.DecodeVLLMBatch(good[:2], 1, &b))
	require.Equal(t, kv.DecodeMalformed, kv.DecodeVLLMBatch([][]byte{good[0], good[1][:7], good[2]}, 1, &b))
	require.Equal(t, kv.DecodeTooLarge, kv.DecodeVLLMBatch([][]byte{good[0], good[1], make([]byte, 1<<20+1)}, 1, &b))
}

// Every proper prefix of a valid batch is malformed; nothing panics.
func TestDecodeVLLMTruncated(t *testing.T) {
	toks := vllmTokens(32, 3)
	h, _ := vllmSHA("x")
	batches := []any{
		[]any{1.0, []any{[]any{"BlockStored", []any{int64(-1), h}, 7, toks, 16, nil, "GPU"}, []any{"BlockRemoved", []any{1}}, []any{"AllBlocksCleared"}}, 1},
		decMap{{"ts", 1.0}, {"events", []any{decMap{{"type", "BlockStored"}, {"block_hashes", []any{1, 2}}, {"parent_block_hash", nil},
			{"token_ids", toks}, {"block_size", 16}, {"lora_id", nil}, {"medium", nil}, {"lora_name", nil}}}}, {"data_parallel_rank", 0}},
	}
	var b kv.VLLMBatch
	for _, batch := range batches {
		frames := vllmFrames(1, batch)
		p := frames[2]
		require.Equal(t, kv.DecodeOK, kv.DecodeVLLMBatch(frames, 1, &b))
		for i := range len(p) {
			frames[2] = p[:i:i]
			require.Equal(t, kv.DecodeMalformed, kv.DecodeVLLMBatch(frames, 1, &b), "prefix of %d bytes", i)
		}
	}
}

// A reused batch reallocates nothing but the two buffers of each stored
// event's block hashing.
func TestDecodeVLLMAllocations(t *testing.T) {
	toks := vllmTokens(64*16, 1)
	frames := vllmFrames(1, []any{0.0, []any{
		[]any{"BlockStored", slices.Repeat([]any{1}, 64), nil, toks, 16, nil, "GPU"},
		[]any{"BlockRemoved", slices.Repeat([]any{1}, 64), "GPU"},
	}})
	var b kv.VLLMBatch
	require.Equal(t, kv.DecodeOK, kv.DecodeVLLMBatch(frames, 1, &b))
	allocs := testing.AllocsPerRun(50, func() {
		if kv.DecodeVLLMBatch(frames, 1, &b) != kv.DecodeOK {
			t.Fatal("decode failed")
		}
	})
	require.LessOrEqual(t, allocs, 2.0)
}

func TestParseVLLMTopic(t *testing.T) {
	addr, model, ok := kv.ParseVLLMTopic([]byte("kv@10.0.0.7:5557@Qwen/Qwen3-0.6B"))
	require.True(t, ok)
	require.Equal(t, "10.0.0.7:5557", string(addr))
	require.Equal(t, "Qwen/Qwen3-0.6B", string(model))
	for _, bad := range []string{"", "kv@", "kv@a", "kv@@m", "kv@a@", "kv-events", "KV@a@m"} {
		_, _, ok := kv.ParseVLLMTopic([]byte(bad))
		require.False(t, ok, bad)
	}
	_, model, ok = kv.ParseVLLMTopic([]byte("kv@[::1]:1@a@b"))
	require.True(t, ok)
	require.True(t, bytes.Equal(model, []byte("a@b")))
}
