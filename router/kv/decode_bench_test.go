package kv_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"switchyard/fakefleet/wire"
	"switchyard/router/kv"
)

// decBench64 is a Stored event of 64 blocks with full-width hashes, as an
// engine publishes after a 1,024-token prompt at block size 16.
func decBench64() wire.RouterEvent {
	rng := rand.New(rand.NewPCG(1, 2))
	blocks := make([]wire.StoredBlock, 64)
	for i := range blocks {
		blocks[i] = wire.StoredBlock{BlockHash: rng.Uint64() | 1<<63, TokensHash: rng.Uint64() | 1<<63}
	}
	parent := rng.Uint64()
	return wire.RouterEvent{WorkerID: 1 << 40, StorageTier: "device", Event: wire.KvCacheEvent{EventID: 1 << 20,
		Data: wire.KvEventData{Stored: &wire.KvStoreData{ParentHash: &parent, Blocks: blocks}}}}
}

func decReport(b *testing.B, n, blocks int, elapsed time.Duration) {
	s := elapsed.Seconds()
	b.ReportMetric(float64(n)/s, "events/s")
	b.ReportMetric(float64(n*blocks)/s, "blocks/s")
}

func BenchmarkDecodeRouterEventStored64(b *testing.B) {
	payload := wire.Marshal(decPtr(decBench64()), false)
	var ev kv.Event
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	n := 0
	start := time.Now()
	for b.Loop() {
		if kv.DecodeRouterEvent(payload, &ev) != kv.DecodeOK {
			b.Fatal("decode failed")
		}
		n++
	}
	decReport(b, n, 64, time.Since(start))
}

// The whole message: frames, envelope and RouterEvent.
func BenchmarkDecodeKVEventsMessageStored64(b *testing.B) {
	msg := wire.KVEventsMessage(1, 2, decBench64(), time.UnixMilli(0))
	d := kv.NewKVEventsDecoder()
	var ev kv.Event
	b.SetBytes(int64(len(msg[3])))
	b.ReportAllocs()
	n := 0
	start := time.Now()
	for b.Loop() {
		if _, _, res := d.Decode(msg, &ev); res != kv.DecodeOK {
			b.Fatal(res)
		}
		n++
	}
	decReport(b, n, 64, time.Since(start))
}

// A vLLM batch of one 64-block store: the decoder hashes 1,024 tokens.
func BenchmarkDecodeVLLMStored64(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	hashes := make([]uint64, 64)
	for i := range hashes {
		hashes[i] = rng.Uint64()
	}
	toks := make([]uint32, 64*16)
	for i := range toks {
		toks[i] = rng.Uint32N(150_000)
	}
	frames := vllmFrames(1, []any{1.0, []any{[]any{"BlockStored", hashes, nil, toks, 16, nil, "GPU"}}, 0})
	var batch kv.VLLMBatch
	b.SetBytes(int64(len(frames[2])))
	b.ReportAllocs()
	n := 0
	start := time.Now()
	for b.Loop() {
		if kv.DecodeVLLMBatch(frames, 1, &batch) != kv.DecodeOK {
			b.Fatal("decode failed")
		}
		n++
	}
	decReport(b, n, 64, time.Since(start))
}
