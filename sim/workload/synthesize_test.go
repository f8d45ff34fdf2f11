package workload

import (
	"testing"

	"pgregory.net/rapid"
)

// The token run at block position i is hash id i's block whatever the other ids and the length,
// and the prompt is always exactly input_length long.
func TestSynthesizeProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ids := rapid.SliceOfN(rapid.Uint64Range(0, 50), 0, 6).Draw(t, "ids")
		n := rapid.IntRange(0, 8*TraceBlockTokens).Draw(t, "n")
		got := synthesize(ids, n)
		if len(got) != n {
			t.Fatalf("len %d, want %d", len(got), n)
		}
		for i, h := range ids {
			lo := i * TraceBlockTokens
			if lo >= n {
				break
			}
			want := appendBlock(nil, h, min(TraceBlockTokens, n-lo))
			if !equalRun(want, got[lo:lo+len(want)]) {
				t.Fatalf("block %d (hash id %d) differs", i, h)
			}
		}
		if !equalRun(got, synthesize(ids, n)) {
			t.Fatal("synthesize is not a pure function")
		}
	})
}

func equalRun(a, b []uint32) bool { return commonPrefix(a, b) == len(a) && len(a) == len(b) }
