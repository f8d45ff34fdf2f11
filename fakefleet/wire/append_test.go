package wire

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"
)

func randomEvent(rng *rand.Rand) RouterEvent {
	u := func() uint64 {
		switch rng.IntN(5) { // every integer width
		case 0:
			return rng.Uint64N(128)
		case 1:
			return rng.Uint64N(256)
		case 2:
			return rng.Uint64N(65536)
		case 3:
			return rng.Uint64N(1 << 32)
		}
		return rng.Uint64()
	}
	ev := RouterEvent{WorkerID: u(), StorageTier: "device", Event: KvCacheEvent{EventID: u(), DPRank: uint32(rng.Uint64N(70000))}}
	switch rng.IntN(3) {
	case 0:
		n := rng.IntN(70000)
		if rng.IntN(3) > 0 {
			n = rng.IntN(20)
		}
		s := &KvStoreData{Blocks: make([]StoredBlock, n)}
		for i := range s.Blocks {
			s.Blocks[i] = StoredBlock{BlockHash: u(), TokensHash: u()}
		}
		if rng.IntN(2) == 0 {
			p := u()
			s.ParentHash = &p
		}
		if rng.IntN(4) == 0 {
			sp := uint32(u())
			s.StartPosition = &sp
		}
		ev.Event.Data.Stored = s
	case 1:
		r := &KvRemoveData{BlockHashes: make([]uint64, rng.IntN(40))}
		for i := range r.BlockHashes {
			r.BlockHashes[i] = u()
		}
		ev.Event.Data.Removed = r
	}
	return ev
}

func TestAppendEncodersMatchMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	at := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	for i := 0; i < 300; i++ {
		ev := randomEvent(rng)
		want := Marshal(&ev, false)
		if got := AppendRouterEvent(nil, &ev); !bytes.Equal(got, want) {
			t.Fatalf("event %d (%+v):\n got %x\nwant %x", i, ev.Event, got[:min(len(got), 80)], want[:min(len(want), 80)])
		}
		pub, seq := rng.Uint64(), rng.Uint64N(1<<40)
		slow := KVEventsMessage(pub, seq, ev, at)
		fast := KVEventsMessageFast(pub, seq, &ev, at)
		if len(slow) != len(fast) {
			t.Fatalf("%d frames, want %d", len(fast), len(slow))
		}
		for f := range slow {
			if !bytes.Equal(slow[f], fast[f]) {
				t.Fatalf("event %d frame %d differs", i, f)
			}
		}
	}
}

func BenchmarkKVEventsMessage(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	ev := RouterEvent{WorkerID: rng.Uint64(), StorageTier: "device", Event: KvCacheEvent{EventID: 9,
		Data: KvEventData{Stored: &KvStoreData{Blocks: make([]StoredBlock, 64)}}}}
	for i := range ev.Event.Data.Stored.Blocks {
		ev.Event.Data.Stored.Blocks[i] = StoredBlock{BlockHash: rng.Uint64(), TokensHash: rng.Uint64()}
	}
	at := time.Now()
	b.Run("reflect", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			KVEventsMessage(1, uint64(i), ev, at)
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			KVEventsMessageFast(1, uint64(i), &ev, at)
		}
	})
}

func TestLoadMessageMatchesMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	at := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	opt := func() *uint64 {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return U64(rng.Uint64N(128))
		case 2:
			return U64(rng.Uint64N(1 << 20))
		}
		return U64(rng.Uint64())
	}
	for i := 0; i < 500; i++ {
		a := ActiveLoad{WorkerID: rng.Uint64() >> rng.IntN(64), DPRank: uint32(rng.Uint64N(1 << 32)),
			ActiveDecodeBlocks: opt(), ActivePrefillTokens: opt(), KVUsedBlocks: opt()}
		if rng.IntN(3) == 0 {
			s := string(bytes.Repeat([]byte("x"), rng.IntN(300)))
			a.SchedulerLoadScope = &s
		}
		want := Marshal(&a, false)
		if got := AppendActiveLoad(nil, &a); !bytes.Equal(got, want) {
			t.Fatalf("load %d (%+v):\n got %x\nwant %x", i, a, got, want)
		}
		pub, seq := rng.Uint64(), rng.Uint64N(1<<40)
		slow := Message("kv_metrics", pub, seq, want, at)
		fast := LoadMessage(pub, seq, a, at)
		if len(slow) != len(fast) {
			t.Fatalf("%d frames, want %d", len(fast), len(slow))
		}
		for f := range slow {
			if !bytes.Equal(slow[f], fast[f]) {
				t.Fatalf("load %d frame %d differs:\n got %x\nwant %x", i, f, fast[f], slow[f])
			}
		}
	}
}

// TestLoadMessageAllocations pins the load publish at three allocations
// (the frame list, its header block and the envelope), which the simulator makes
// about 100,000 times per Mooncake run.
func TestLoadMessageAllocations(t *testing.T) {
	a := ActiveLoad{WorkerID: 7, DPRank: 1, ActiveDecodeBlocks: U64(300), ActivePrefillTokens: U64(9000), KVUsedBlocks: U64(4000)}
	at := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	if n := testing.AllocsPerRun(100, func() { LoadMessage(1, 2, a, at) }); n > 3 {
		t.Fatalf("%v allocations per load message, want 3", n)
	}
}

// A kv-events message is four allocations whatever its size: the buffers
// are sized for the widest integers up front and never regrow.
func TestKVEventsMessageAllocations(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	max64, sp := ^uint64(0), ^uint32(0)
	for _, n := range []int{0, 1, 7, 300} {
		blocks := make([]StoredBlock, n)
		for i := range blocks {
			blocks[i] = StoredBlock{BlockHash: max64, TokensHash: max64}
		}
		ev := RouterEvent{WorkerID: max64, StorageTier: "device", Event: KvCacheEvent{EventID: max64, DPRank: sp,
			Data: KvEventData{Stored: &KvStoreData{ParentHash: &max64, StartPosition: &sp, Blocks: blocks}}}}
		if a := testing.AllocsPerRun(20, func() { KVEventsMessageFast(max64, max64, &ev, at) }); a != 4 {
			t.Errorf("%d blocks: %v allocations, want 4", n, a)
		}
		hashes := make([]uint64, n)
		for i := range hashes {
			hashes[i] = max64
		}
		rm := RouterEvent{WorkerID: max64, StorageTier: "device", Event: KvCacheEvent{EventID: max64, DPRank: sp,
			Data: KvEventData{Removed: &KvRemoveData{BlockHashes: hashes}}}}
		if a := testing.AllocsPerRun(20, func() { KVEventsMessageFast(max64, max64, &rm, at) }); a != 4 {
			t.Errorf("%d removed: %v allocations, want 4", n, a)
		}
	}
}
