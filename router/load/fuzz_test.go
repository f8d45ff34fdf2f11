package load

import (
	"testing"

	"switchyard/fakefleet/wire"
	"switchyard/router/events"
)

func FuzzDecodeActiveLoad(f *testing.F) {
	f.Add(wire.Marshal(&wire.ActiveLoad{WorkerID: 1, DPRank: 2, KVUsedBlocks: wire.U64(3)}, false))
	f.Add(wire.Marshal(&wire.ActiveLoad{WorkerID: 1, ActiveDecodeBlocks: wire.U64(9)}, true))
	f.Add([]byte{0x91, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var a ActiveLoad
		_ = DecodeActiveLoad(b, &a)
	})
}

// FuzzStoreApply drives whole messages through the store: it must never
// panic and never hold more than its ceiling.
func FuzzStoreApply(f *testing.F) {
	good := sample(1, 0, 5)
	f.Add(good[3], uint64(1))
	f.Fuzz(func(t *testing.T, frame []byte, seq uint64) {
		s, _ := newStore(t)
		frames := sample(seq, 0, 1)
		frames[3] = frame
		s.Apply(&events.LoadMessage{Namespace: "dynamo", PublisherID: pid, Frames: frames})
		if s.Len() > 1 {
			t.Fatal("one message made more than one sample")
		}
	})
}
