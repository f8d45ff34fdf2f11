package engine

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

type scenario struct {
	cfg  Config
	reqs []Request
}

// genScenario draws requests whose prompts start with prefixes from a small
// pool, so prefix hits, shared blocks and evictions all happen.
func genScenario(t *rapid.T, tinyKV bool) scenario {
	bs := rapid.SampledFrom([]int{1, 2, 4}).Draw(t, "bs")
	blocks := rapid.IntRange(16, 64).Draw(t, "blocks")
	if tinyKV {
		blocks = rapid.IntRange(2, 8).Draw(t, "tinyBlocks")
	}
	cfg := Config{BlockSize: bs, TotalKVBlocks: blocks,
		MaxNumBatchedTokens: rapid.IntRange(1, 24).Draw(t, "budget"),
		MaxNumSeqs:          rapid.IntRange(1, 6).Draw(t, "seats"),
		Timing:              Constant{Prefill: 3 * time.Millisecond, Step: time.Millisecond}}
	pool := rapid.SliceOfN(rapid.SliceOfN(rapid.Uint32Range(0, 50), 0, 12), 1, 3).Draw(t, "prefixes")
	n := rapid.IntRange(1, 12).Draw(t, "n")
	reqs := make([]Request, n)
	at := t0
	for i := range reqs {
		p := pool[rapid.IntRange(0, len(pool)-1).Draw(t, "prefix")]
		toks := append(slices.Clone(p), rapid.SliceOfN(rapid.Uint32Range(0, 50), 0, 6).Draw(t, "suffix")...)
		if len(toks) == 0 {
			toks = []uint32{1}
		}
		at = at.Add(time.Duration(rapid.IntRange(0, 5).Draw(t, "gap")) * time.Millisecond)
		reqs[i] = Request{ID: uint64(i + 1), Tokens: toks, MaxTokens: rapid.IntRange(1, 8).Draw(t, "max"), Arrival: at}
	}
	return scenario{cfg, reqs}
}

type trace struct {
	out    []Output
	events []KVEvent
	e      *Engine
}

// run drives the engine like a host would: submissions at their arrival
// times, Advance at every NextEvent, all in one virtual timeline.
func run(t *rapid.T, sc scenario) trace {
	e := New(sc.cfg)
	var tr trace
	next := 0
	for steps := 0; ; steps++ {
		if steps > 100_000 {
			t.Fatalf("no progress")
		}
		at, busy := e.NextEvent()
		if next < len(sc.reqs) && (!busy || !sc.reqs[next].Arrival.After(at)) {
			e.Submit(sc.reqs[next], sc.reqs[next].Arrival)
			next++
			continue
		}
		if !busy {
			break
		}
		tr.out = append(tr.out, e.Advance(at)...)
		tr.events = append(tr.events, e.DrainKVEvents()...)
	}
	tr.e = e
	return tr
}

func TestPropertyRunsToCompletion(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { _ = checkRun(t, genScenario(t, false)) })
}

func TestPropertyPreemptionTinyKV(t *testing.T) {
	var preemptions uint64
	rapid.Check(t, func(t *rapid.T) { preemptions += checkRun(t, genScenario(t, true)) })
	if preemptions == 0 {
		t.Fatal("tiny caches never preempted: the generator is too gentle")
	}
}

func checkRun(t *rapid.T, sc scenario) (preemptions uint64) {
	tr := run(t, sc)
	e := tr.e
	bs := sc.cfg.BlockSize
	got, first, done := map[uint64]int{}, map[uint64]int{}, map[uint64]int{}
	for _, o := range tr.out {
		if done[o.RequestID] > 0 {
			t.Fatalf("output after finish: %+v", o)
		}
		got[o.RequestID] += o.NewTokens
		if o.FirstToken {
			first[o.RequestID]++
		}
		if o.Finished {
			done[o.RequestID]++
		}
	}
	for _, r := range sc.reqs {
		fits := (len(r.Tokens)+r.MaxTokens+bs-1)/bs <= sc.cfg.TotalKVBlocks
		switch {
		case done[r.ID] != 1:
			t.Fatalf("request %d finished %d times", r.ID, done[r.ID])
		case !fits && got[r.ID] != 0:
			t.Fatalf("rejected request %d produced tokens", r.ID)
		case fits && (got[r.ID] != r.MaxTokens || first[r.ID] != 1):
			t.Fatalf("request %d: %d tokens (%d first), want %d", r.ID, got[r.ID], first[r.ID], r.MaxTokens)
		}
	}
	// No leaks: every block is free or cached with no references.
	if len(e.running) != 0 || len(e.waiting) != 0 {
		t.Fatal("requests left behind")
	}
	e.pool.cache.each(func(i int32) {
		if b := e.pool.slab[i]; b.refs != 0 || e.pool.lookup(b.hash) != i {
			t.Fatalf("block %d (slot %d) still has %d refs or is indexed elsewhere", b.hash, i, b.refs)
		}
	})
	cached := e.pool.cache.len()
	if e.pool.free+cached != sc.cfg.TotalKVBlocks || e.pool.lruLen != cached || lruWalk(e.pool) != cached {
		t.Fatalf("free %d + cached %d != %d", e.pool.free, cached, sc.cfg.TotalKVBlocks)
	}
	if used, dec, pre := e.Load(); used != 0 || dec != 0 || pre != 0 {
		t.Fatalf("idle load %d %d %d", used, dec, pre)
	}
	// Replaying the events reproduces the cache, and they are well formed.
	set := map[uint64]bool{}
	for i, ev := range tr.events {
		if ev.EventID != uint64(i+1) {
			t.Fatalf("event id %d at %d", ev.EventID, i)
		}
		switch ev.Kind {
		case Stored:
			if ev.ParentHash != nil && !set[*ev.ParentHash] {
				t.Fatalf("stored under unknown parent %d", *ev.ParentHash)
			}
			for _, b := range ev.Blocks {
				if set[b.BlockHash] {
					t.Fatalf("block %d stored twice", b.BlockHash)
				}
				set[b.BlockHash] = true
			}
		case Removed:
			for _, h := range ev.Removed {
				if !set[h] {
					t.Fatalf("removed unknown block %d", h)
				}
				delete(set, h)
			}
		default:
			t.Fatalf("unexpected %v", ev.Kind)
		}
	}
	if len(set) != e.pool.cache.len() {
		t.Fatalf("replayed %d blocks, engine caches %d", len(set), e.pool.cache.len())
	}
	for h := range set {
		if e.pool.lookup(h) == 0 {
			t.Fatalf("replayed block %d not cached", h)
		}
	}
	// Determinism: the same inputs give the same outputs and events.
	again := run(t, sc)
	if !reflect.DeepEqual(again.out, tr.out) || !reflect.DeepEqual(again.events, tr.events) {
		t.Fatal("engine is not deterministic")
	}
	return e.Stats().Preemptions
}

// A request repeating an earlier prompt's prefix prefills exactly the part
// not covered by cached complete blocks (large cache, so nothing evicts).
func TestPropertyPrefixHitAccounting(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bs := rapid.SampledFrom([]int{1, 2, 4}).Draw(t, "bs")
		e := New(Config{BlockSize: bs, TotalKVBlocks: 256, MaxNumBatchedTokens: rapid.IntRange(1, 16).Draw(t, "budget"),
			Timing: Constant{Prefill: time.Millisecond, Step: time.Millisecond}})
		a := rapid.SliceOfN(rapid.Uint32Range(0, 3), 1, 24).Draw(t, "a")
		k := rapid.IntRange(0, len(a)).Draw(t, "k")
		b := append(slices.Clone(a[:k]), rapid.SliceOfN(rapid.Uint32Range(0, 3), 1, 8).Draw(t, "suffix")...)
		e.Submit(Request{ID: 1, Tokens: a, MaxTokens: 2}, t0)
		runAll(e)
		before := e.Stats()
		e.Submit(Request{ID: 2, Tokens: b, MaxTokens: 1}, t0.Add(time.Hour))
		runAll(e)
		common := 0
		for common < len(a) && common < len(b) && a[common] == b[common] {
			common++
		}
		hit := min(common/bs, (len(b)-1)/bs) * bs
		after := e.Stats()
		if c := after.CachedTokens - before.CachedTokens; c != uint64(hit) {
			t.Fatalf("cached %d, want %d", c, hit)
		}
		if p := after.PrefillTokens - before.PrefillTokens; p != uint64(len(b)-hit) {
			t.Fatalf("prefilled %d, want %d", p, len(b)-hit)
		}
	})
}

// lruWalk counts the pool's LRU list by following its links both ways,
// failing on a list whose directions disagree.
func lruWalk(p *pool) int {
	n := 0
	for i := p.slab[0].next; i != 0; i = p.slab[i].next {
		if p.slab[p.slab[i].next].prev != i || p.slab[i].refs != 0 {
			return -1
		}
		n++
	}
	return n
}
