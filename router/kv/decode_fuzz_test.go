package kv_test

import (
	"slices"
	"testing"
	"time"

	"switchyard/fakefleet/wire"
	"switchyard/router/kv"
)

func decCheckEvent(t *testing.T, res kv.DecodeResult, ev *kv.Event) {
	t.Helper()
	if !slices.Contains(kv.DecodeResults(), res) {
		t.Fatalf("result %d outside the closed set", res)
	}
	if len(ev.Blocks) > kv.MaxBlocksPerEvent || len(ev.Removed) > kv.MaxBlocksPerEvent {
		t.Fatalf("%d blocks, %d removed: over the bound", len(ev.Blocks), len(ev.Removed))
	}
	if res != kv.DecodeOK && (len(ev.Blocks) != 0 || len(ev.Removed) != 0 || ev.Kind != 0) {
		t.Fatalf("%v left an event behind", res)
	}
	if res == kv.DecodeOK && (ev.Kind < kv.Stored || ev.Kind > kv.Cleared) {
		t.Fatalf("decoded kind %d", ev.Kind)
	}
}

func FuzzDecodeRouterEvent(f *testing.F) {
	f.Add(wire.Marshal(decPtr(decStoredEvent()), false))
	f.Add(wire.Marshal(decPtr(decStoredEvent()), true))
	f.Add(decPack(decRouterEvent(decField{"residency_domain", "worker"}, decField{"event", decKVEvent(1, decMap{{"removed", decMap{{"block_hashes", []any{int64(-1), 2}}}}})})))
	f.Add(decPack([]any{7, "host_pinned", nil, []any{3, "cleared", 1}, decMap{{"owner", 1}}}))
	f.Add(decPack(decUnknownKeys()))
	f.Add([]byte{0x81, 0xa5, 'e', 'v', 'e', 'n', 't', 0xdd, 0xff, 0xff, 0xff, 0xff})
	at := time.UnixMilli(0)
	d := kv.NewKVEventsDecoder()
	f.Fuzz(func(t *testing.T, payload []byte) {
		var ev kv.Event
		res := kv.DecodeRouterEvent(payload, &ev)
		decCheckEvent(t, res, &ev)
		// Through the frames, the same payload decodes the same way.
		var ev2 kv.Event
		_, _, res2 := d.Decode(wire.Message(kv.KVEventsTopic, 1, 2, payload, at), &ev2)
		if res2 != res {
			t.Fatalf("direct %v, through the envelope %v", res, res2)
		}
	})
}

func FuzzDecodeVLLMBatch(f *testing.F) {
	toks := vllmTokens(32, 1)
	h, _ := vllmSHA("seed")
	f.Add(decPack([]any{1.0, []any{
		[]any{"BlockStored", []any{int64(-1), h}, 7, toks, 16, nil, "GPU"},
		[]any{"BlockRemoved", []any{1}, "CPU"},
		[]any{"AllBlocksCleared"},
	}, 1}))
	f.Add(decPack(decMap{{"ts", 1.0}, {"events", []any{
		decMap{{"type", "BlockStored"}, {"block_hashes", []any{1, 2}}, {"parent_block_hash", nil}, {"token_ids", toks},
			{"block_size", 16}, {"lora_id", 1}, {"medium", nil}, {"lora_name", "a"}},
		decMap{{"type", "BlockStored"}, {"block_hashes", []any{1}}, {"token_ids", toks[:16]}, {"block_size", 16},
			{"metadata", decMap{{"cache_salt", "s"}}}, {"group_idx", 1}},
	}}, {"data_parallel_rank", 3}}))
	f.Add([]byte{0x92, 0x00, 0xdc, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, payload []byte) {
		var b kv.VLLMBatch
		res := kv.DecodeVLLMBatch([][]byte{[]byte("kv@a:1@m"), make([]byte, 8), payload}, 1, &b)
		if !slices.Contains(kv.DecodeResults(), res) {
			t.Fatalf("result %d outside the closed set", res)
		}
		if len(b.Events) > kv.MaxEventsPerBatch || len(b.Events)+b.Skipped > kv.MaxEventsPerBatch {
			t.Fatalf("%d events, %d skipped: over the bound", len(b.Events), b.Skipped)
		}
		if res != kv.DecodeOK && (len(b.Events) != 0 || b.Skipped != 0) {
			t.Fatalf("%v left events behind", res)
		}
		for i := range b.Events {
			decCheckEvent(t, res, &b.Events[i])
			if e := &b.Events[i]; e.EventID != 0 || e.DPRank != b.DPRank || e.WorkerID != 1 {
				t.Fatalf("event %d: %+v", i, e)
			}
		}
	})
}
