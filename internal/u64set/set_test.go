package u64set

import (
	"testing"

	"pgregory.net/rapid"
)

// The set agrees with a Go map, for hashes spread over 64 bits, crowded
// into a few home slots, and for the hash 0.
func TestHashSetMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s Set
		want := map[uint64]bool{}
		crowd := rapid.Bool().Draw(t, "crowd")
		key := func(label string) uint64 {
			k := rapid.Uint64Range(0, 3000).Draw(t, label)
			if crowd {
				return k << 50
			}
			return k * 0x2545f4914f6cdd1d
		}
		for range rapid.IntRange(0, 3000).Draw(t, "adds") {
			k := key("add")
			s.Add(k)
			want[k] = true
		}
		if s.Len() != len(want) {
			t.Fatalf("len %d, want %d", s.Len(), len(want))
		}
		for k := range want {
			if !s.Has(k) {
				t.Fatalf("%x missing", k)
			}
		}
		for range 50 {
			if k := key("probe"); s.Has(k) != want[k] {
				t.Fatalf("has %x = %v, want %v", k, s.Has(k), want[k])
			}
		}
	})
}
