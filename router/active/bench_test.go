package active

import "testing"

// BenchmarkRequestLife is what the core's account costs one request picked
// among 64 ranks with 256 others in flight: the picker's 64 Load lookups,
// then Add, FirstToken and End.
func BenchmarkRequestLife(b *testing.B) {
	const ranks, inFlight = 64, 256
	s := New()
	var ks [ranks]Rank
	for i := range ks {
		ks[i] = Rank{Namespace: "dynamo", WorkerID: uint64(0x100 + i)}
	}
	for id := uint64(0); id < inFlight; id++ {
		s.Add(id, Hold{Rank: ks[id%ranks], PrefillTokens: 2048, Blocks: 128})
	}
	b.ReportAllocs()
	b.ResetTimer()
	var sink uint64
	for i := range b.N {
		for _, k := range ks {
			sink += s.Load(k).PrefillTokens
		}
		id := uint64(i) + inFlight
		s.Add(id, Hold{Rank: ks[id%ranks], PrefillTokens: 2048, Blocks: 128})
		s.FirstToken(id - inFlight/2)
		s.End(id - inFlight)
	}
	_ = sink
}
