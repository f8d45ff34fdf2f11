package kv

import (
	"slices"
	"testing"
)

// fuzzBytes reads operands from the fuzz input; past its end it reads 0.
type fuzzBytes struct {
	b []byte
	i int
}

func (f *fuzzBytes) next() byte {
	if f.i >= len(f.b) {
		return 0
	}
	c := f.b[f.i]
	f.i++
	return c
}

func (f *fuzzBytes) more() bool { return f.i < len(f.b) }

var fuzzRanks = func() []Rank {
	var out []Rank
	for _, ns := range []string{"a", "b"} {
		for w := uint64(1); w <= 4; w++ {
			for dp := uint32(0); dp < 2; dp++ {
				out = append(out, Rank{ns, w, dp})
			}
		}
	}
	return out
}()

// fuzzEvent decodes one event over small domains: 16 ranks (and a worker
// never live), 4 tokens hashes, 8 engine hashes, raw event ids.
func fuzzEvent(f *fuzzBytes) (string, Event) {
	c := f.next()
	r := fuzzRanks[c&15]
	if c&16 != 0 {
		r.WorkerID = 9
	}
	ev := Event{WorkerID: r.WorkerID, DPRank: r.DPRank, EventID: uint64(f.next())}
	if t := f.next(); t&0xc0 == 0xc0 {
		ev.Tier = Tier(t & 7)
	}
	k := f.next()
	ev.Kind = EventKind(k % 5) // 0 and 4 are unknown kinds
	switch ev.Kind {
	case Stored:
		if k&0x80 != 0 {
			ev.HasParent, ev.ParentHash = true, uint64(f.next()&7)+1
		}
		for range f.next() % 7 {
			ev.Blocks = append(ev.Blocks, StoredBlock{BlockHash: uint64(f.next()&7) + 1, TokensHash: uint64(f.next()&3) + 100})
		}
	case Removed:
		for range f.next() % 4 {
			ev.Removed = append(ev.Removed, uint64(f.next()&7)+1)
		}
	}
	return r.Namespace, ev
}

// FuzzIndex applies arbitrary operation sequences to the index and the
// reference model, checking the invariants and every answer after each.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{0, 0xff, 0xff, 2, 0, 1, 0, 1, 3, 1, 100, 2, 101, 3, 102})
	f.Add([]byte{1, 0, 0xff, 0xff, 3, 0, 5, 0, 0x81, 1, 2, 2, 5, 101, 4, 0, 7, 0, 2, 2, 1, 2, 7, 3, 0, 1, 2, 3})
	f.Add([]byte{0, 0x0f, 0xf0, 2, 2, 9, 0, 1, 4, 1, 100, 2, 101, 1, 100, 1, 103, 5, 2, 9, 0, 3, 6, 2, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzBytes{b: data}
		l := defaultLimits
		if in.next()&1 != 0 {
			l = limits{nodes: 6, perRank: 4, ownerships: 8, ownersPerNode: 2, ranks: 5}
		}
		x, m := newIndex(l), newRef(l)
		var out Matches
		prompts := [][]uint64{nil, {100}, {100, 101}, {101, 100, 102}, {100, 100, 100, 100}}
		for ops := 0; in.more() && ops < 256; ops++ {
			switch op := in.next() % 8; op {
			case 0:
				mask := uint16(in.next()) | uint16(in.next())<<8
				var live []Rank
				for i, r := range fuzzRanks {
					if mask&(1<<i) != 0 {
						live = append(live, r)
					}
				}
				if got, want := x.SetLive(slices.Values(live)), m.setLive(live); got != want {
					t.Fatalf("SetLive refused %d, want %d", got, want)
				}
			case 1:
				r := fuzzRanks[in.next()&15]
				if got, want := x.ClearRank(r), m.clearRank(r); got != want {
					t.Fatalf("ClearRank = %v, want %v", got, want)
				}
			case 7:
				var p []uint64
				for range in.next() % 8 {
					p = append(p, uint64(in.next()&3)+100)
				}
				prompts = append(prompts[:5], p)
			default:
				ns, ev := fuzzEvent(in)
				if got, want := x.Apply(ns, &ev), m.apply(ns, &ev); got != want {
					t.Fatalf("Apply(%s, %+v) = %v, want %v", ns, ev, got, want)
				}
			}
			if err := checkIndex(x); err != nil {
				t.Fatal(err)
			}
			for _, p := range prompts {
				if err := compareWithRef(x, m, p, &out); err != nil {
					t.Fatal(err)
				}
			}
		}
		x.SetLive(slices.Values([]Rank(nil)))
		if err := checkIndex(x); err != nil || x.used != 0 || x.owned != 0 {
			t.Fatalf("after SetLive(none): %v, %d nodes, %d ownerships", err, x.used, x.owned)
		}
	})
}

// FuzzFindMatchesWalk applies arbitrary operation sequences and checks
// after each that the edge walk answers exactly as the previous merge
// walk, order included, and that every memo it trusts is right.
func FuzzFindMatchesWalk(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{0, 0xff, 0xff, 2, 0, 1, 0, 1, 3, 1, 100, 2, 101, 3, 102})
	f.Add([]byte{1, 0, 0xff, 0xff, 3, 0, 5, 0, 0x81, 1, 2, 2, 5, 101, 4, 0, 7, 0, 2, 2, 1, 2, 7, 3, 0, 1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzBytes{b: data}
		x := newIndex(defaultLimits)
		x.SetLive(slices.Values(fuzzRanks))
		var mm mergeMatcher
		var out, want Matches
		prompts := [][]uint64{{100, 101, 102}, {100, 100, 100, 100}, {101, 100}}
		for ops := 0; in.more() && ops < 256; ops++ {
			switch op := in.next() % 6; op {
			case 0:
				mask := uint16(in.next()) | uint16(in.next())<<8
				var live []Rank
				for i, r := range fuzzRanks {
					if mask&(1<<i) != 0 {
						live = append(live, r)
					}
				}
				x.SetLive(slices.Values(live))
			case 1:
				var p []uint64
				for range in.next() % 8 {
					p = append(p, uint64(in.next()&3)+100)
				}
				prompts = append(prompts[:3], p)
			default:
				ns, ev := fuzzEvent(in)
				x.Apply(ns, &ev)
			}
			for _, p := range prompts {
				if err := agreeWithMerge(x, &mm, p, &out, &want); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
