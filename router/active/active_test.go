package active

import (
	"math/rand/v2"
	"testing"
)

// naive recomputes every rank's load from scratch out of a plain list of
// requests: the reference the running sums must agree with.
type naive struct {
	reqs map[uint64]*naiveReq
}

type naiveReq struct {
	holds      []Hold
	firstToken bool
	generated  uint64
}

func (n *naive) load(k Rank) Load {
	var l Load
	for _, r := range n.reqs {
		for _, h := range r.holds {
			if h.Rank != k || (h.UntilFirstToken && r.firstToken) {
				continue
			}
			l.Requests++
			l.Blocks += h.Blocks
			if !r.firstToken {
				l.PrefillTokens += h.PrefillTokens
			}
			if h.BlockSize > 0 && r.generated < h.OutputTokens {
				l.OutputBlocks += (h.OutputTokens - r.generated + h.BlockSize - 1) / h.BlockSize
			}
		}
	}
	return l
}

func TestSetAgreesWithNaiveModel(t *testing.T) {
	ranks := []Rank{{"ns", 1, 0}, {"ns", 1, 1}, {"ns", 2, 0}, {"other", 1, 0}}
	for seed := uint64(1); seed <= 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		s, ref := New(), &naive{reqs: map[uint64]*naiveReq{}}
		for step := 0; step < 2000; step++ {
			id := rng.Uint64N(64)
			switch op := rng.IntN(10); {
			case op < 4:
				holds := randomHolds(rng, ranks)
				_, dup := ref.reqs[id]
				if got := s.Add(id, holds...); got == dup {
					t.Fatalf("seed %d step %d: Add(%d) = %v with duplicate %v", seed, step, id, got, dup)
				}
				if !dup {
					ref.reqs[id] = &naiveReq{holds: holds}
				}
			case op < 6:
				r := ref.reqs[id]
				want := r != nil && !r.firstToken
				if got := s.FirstToken(id); got != want {
					t.Fatalf("seed %d step %d: FirstToken(%d) = %v, want %v", seed, step, id, got, want)
				}
				if r != nil {
					r.firstToken = true
				}
			case op < 8:
				r := ref.reqs[id]
				gen := rng.Uint64N(300)
				if r != nil && gen < r.generated {
					gen = r.generated // output only grows
				}
				if got := s.Progress(id, gen); got != (r != nil) {
					t.Fatalf("seed %d step %d: Progress(%d) = %v", seed, step, id, got)
				}
				if r != nil {
					r.generated = gen
				}
			default:
				_, had := ref.reqs[id]
				if got := s.End(id); got != had {
					t.Fatalf("seed %d step %d: End(%d) = %v, want %v", seed, step, id, got, had)
				}
				delete(ref.reqs, id)
			}
			for _, k := range ranks {
				if got, want := s.Load(k), ref.load(k); got != want {
					t.Fatalf("seed %d step %d: rank %v: load %+v, want %+v", seed, step, k, got, want)
				}
			}
			if s.Len() != len(ref.reqs) {
				t.Fatalf("seed %d step %d: Len %d, want %d", seed, step, s.Len(), len(ref.reqs))
			}
		}
		for id := range ref.reqs {
			s.End(id)
		}
		if len(s.ranks) != 0 {
			t.Fatalf("seed %d: ranks left after every request ended: %v", seed, s.ranks)
		}
	}
}

// randomHolds is an aggregated pin or a prefill/decode pair on distinct
// ranks.
func randomHolds(rng *rand.Rand, ranks []Rank) []Hold {
	prompt := rng.Uint64N(4000)
	bs := []uint64{0, 16, 64}[rng.IntN(3)]
	decode := Hold{Rank: ranks[rng.IntN(len(ranks))], Blocks: rng.Uint64N(100), OutputTokens: rng.Uint64N(500), BlockSize: bs}
	if rng.IntN(2) == 0 {
		decode.PrefillTokens = prompt
		return []Hold{decode}
	}
	p := ranks[rng.IntN(len(ranks))]
	for p == decode.Rank {
		p = ranks[rng.IntN(len(ranks))]
	}
	return []Hold{decode, {Rank: p, PrefillTokens: prompt, Blocks: decode.Blocks, UntilFirstToken: true}}
}

func TestSetRefusesBeyondItsBounds(t *testing.T) {
	s := New()
	k := Rank{"ns", 1, 0}
	for id := uint64(0); id < MaxPerRank; id++ {
		if !s.Add(id, Hold{Rank: k, Blocks: 1}) {
			t.Fatalf("request %d refused below the per-rank bound", id)
		}
	}
	if s.Add(MaxPerRank, Hold{Rank: k, Blocks: 1}) {
		t.Fatal("a request beyond MaxPerRank was accepted")
	}
	if s.Add(1, Hold{Rank: Rank{"ns", 2, 0}}) {
		t.Fatal("a duplicate request id was accepted")
	}
	if s.Add(99999) || s.Add(99998, Hold{}, Hold{}, Hold{}) {
		t.Fatal("a request with no or too many holds was accepted")
	}
	if got := s.Refused(); got != 4 {
		t.Fatalf("refused = %d, want 4", got)
	}
	if got := s.Load(k); got.Requests != MaxPerRank || got.Blocks != MaxPerRank {
		t.Fatalf("load after refusals = %+v", got)
	}
	for id := uint64(MaxPerRank); s.Len() < MaxRequests; id++ {
		s.Add(id+1_000_000, Hold{Rank: Rank{"ns", id, 0}})
	}
	if s.Add(1<<40, Hold{Rank: Rank{"ns", 1 << 40, 0}}) {
		t.Fatal("a request beyond MaxRequests was accepted")
	}
}

func TestPrefillRankOfAPairLetsGoAtFirstToken(t *testing.T) {
	s := New()
	d, p := Rank{"ns", 1, 0}, Rank{"ns", 2, 0}
	s.Add(7, Hold{Rank: d, Blocks: 4, OutputTokens: 100, BlockSize: 16},
		Hold{Rank: p, PrefillTokens: 60, Blocks: 4, UntilFirstToken: true})
	if got := s.Load(d); got != (Load{Blocks: 4, OutputBlocks: 7, Requests: 1}) {
		t.Fatalf("decode rank before the first token: %+v", got)
	}
	if got := s.Load(p); got != (Load{PrefillTokens: 60, Blocks: 4, Requests: 1}) {
		t.Fatalf("prefill rank before the first token: %+v", got)
	}
	s.FirstToken(7)
	if got := s.Load(p); got != (Load{}) {
		t.Fatalf("prefill rank after the first token: %+v", got)
	}
	s.Progress(7, 33)
	if got := s.Load(d); got.OutputBlocks != 5 {
		t.Fatalf("output blocks after 33 of 100 tokens = %d, want ceil(67/16) = 5", got.OutputBlocks)
	}
	s.End(7)
	if got := s.Load(d); got != (Load{}) {
		t.Fatalf("decode rank after the end: %+v", got)
	}
}
