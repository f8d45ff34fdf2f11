package engine

import (
	"testing"

	"pgregory.net/rapid"
)

// The index agrees with a Go map under any sequence of inserts and
// deletes, including hashes crowded into a few home slots (their probe
// runs wrap around the table and deletions shift them back) and hashes
// that share a tag.
func TestBlockIndexMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var x blockIndex
		slab := []cachedBlock{{}} // slot 0 is never used
		want := map[uint64]int32{}
		crowd := rapid.Bool().Draw(t, "crowd")
		key := func(label string) uint64 {
			k := rapid.Uint64Range(0, 200).Draw(t, label)
			if crowd {
				return k<<59 | k // few tags and homes; the low bits tell them apart
			}
			return k * 0x2545f4914f6cdd1d
		}
		for range rapid.IntRange(0, 400).Draw(t, "ops") {
			k := key("key")
			slot, ok := want[k]
			switch {
			case ok && rapid.Bool().Draw(t, "del"):
				x.del(k, slot)
				delete(want, k)
			case !ok:
				slab = append(slab, cachedBlock{hash: k})
				want[k] = int32(len(slab) - 1)
				x.put(k, int32(len(slab)-1))
			}
			if x.len() != len(want) {
				t.Fatalf("len %d, want %d", x.len(), len(want))
			}
		}
		for k, v := range want {
			if got := x.get(k, slab); got != v {
				t.Fatalf("get %x = %d, want %d", k, got, v)
			}
		}
		seen := 0
		x.each(func(s int32) {
			if want[slab[s].hash] != s {
				t.Fatalf("each: slot %d not indexed for %x", s, slab[s].hash)
			}
			seen++
		})
		if seen != len(want) {
			t.Fatalf("each saw %d, want %d", seen, len(want))
		}
		for range 20 {
			if k := key("absent"); want[k] == 0 && x.get(k, slab) != 0 {
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
