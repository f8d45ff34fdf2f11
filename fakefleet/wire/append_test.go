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
