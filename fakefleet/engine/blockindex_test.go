package engine

import (
	"testing"

	"pgregory.net/rapid"
)

// The index agrees with a Go map under any sequence of puts and deletes,
// including keys crowded into a few home slots (their probe runs wrap
// around the table and deletions shift them back).
func TestBlockIndexMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var x blockIndex
		want := map[uint64]int32{}
		crowd := rapid.Bool().Draw(t, "crowd")
		key := func(label string) uint64 {
			k := rapid.Uint64Range(0, 200).Draw(t, label)
			if crowd {
				return k << 58 // few distinct high bits: shared homes
			}
			return k * 0x2545f4914f6cdd1d
		}
		for i := range rapid.IntRange(0, 400).Draw(t, "ops") {
			k := key("key")
			if rapid.IntRange(0, 2).Draw(t, "op") == 0 {
				x.del(k)
				delete(want, k)
			} else {
				x.put(k, int32(i+1))
				want[k] = int32(i + 1)
			}
			if x.len() != len(want) {
				t.Fatalf("len %d, want %d", x.len(), len(want))
			}
		}
		for k, v := range want {
			if got := x.get(k); got != v {
				t.Fatalf("get %x = %d, want %d", k, got, v)
			}
		}
		seen := 0
		x.each(func(h uint64, s int32) {
			if want[h] != s {
				t.Fatalf("each: %x = %d, want %d", h, s, want[h])
			}
			seen++
		})
		if seen != len(want) {
			t.Fatalf("each saw %d, want %d", seen, len(want))
		}
		for range 20 {
			if k := key("absent"); want[k] == 0 && x.get(k) != 0 {
				t.Fatalf("absent %x found", k)
			}
		}
	})
}

// A cached block's lookup, insert and eviction allocate nothing once the
// pool's slab and index have grown.
func TestPoolSteadyStateAllocatesNothing(t *testing.T) {
	p := newPool(256, func(KVEvent) {})
	h := uint64(1)
	cycle := func() {
		// Take a block, cache it, release it, and evict it again.
		if !p.take(1) {
			t.Fatal("take failed")
		}
		i := p.insert(h, h)
		if p.lookup(h) != i {
			t.Fatal("lookup missed")
		}
		p.unref(i)
		if p.evictOldest() != h {
			t.Fatal("evicted another block")
		}
		h++
	}
	for range 512 {
		cycle()
	}
	if n := testing.AllocsPerRun(1000, cycle); n != 0 {
		t.Fatalf("%v allocations per cached block", n)
	}
}
