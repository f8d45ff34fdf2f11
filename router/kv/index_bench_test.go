package kv

import (
	"bufio"
	"container/list"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"switchyard/internal/traces"
)

func benchRanks(n int) []Rank {
	out := make([]Rank, n)
	for i := range out {
		out[i] = Rank{"dynamo", uint64(i) + 1, 0}
	}
	return out
}

// BenchmarkApply measures event ingestion: each step stores a new 64-block
// chain from the root on one of 64 ranks (32 blocks from one of 16 shared
// prefixes, 32 unique) and removes the whole chain that rank stored 8
// steps of its own earlier, so the index stays at a steady size (about
// 17,000 nodes, 33,000 ownerships). Every engine hash is new, so the
// shared prefixes are owned by many ranks and several times by one rank.
// One step applies 128 blocks.
func BenchmarkApply(b *testing.B) {
	const (
		ranks, groups, half, window = 64, 16, 32, 8
		ring                        = ranks * 32 // steps before tails repeat
	)
	rs := benchRanks(ranks)
	stores := make([]Event, ring)
	for k := range stores {
		r := rs[k%ranks]
		g := uint64(k*7) % groups
		bs := make([]StoredBlock, 2*half)
		for i := range bs {
			tok := g<<32 | uint64(i) // shared prefix
			if i >= half {
				tok = 1<<62 | uint64(k)<<16 | uint64(i) // unique tail
			}
			bs[i] = StoredBlock{BlockHash: uint64(k)<<16 | uint64(i) | 1<<63, TokensHash: tok}
		}
		stores[k] = Event{WorkerID: r.WorkerID, Kind: Stored, Blocks: bs}
	}
	removes := make([]Event, ring)
	for k := range removes {
		old := stores[(k-ranks*window+ring)%ring]
		hs := make([]uint64, len(old.Blocks))
		for i, bl := range old.Blocks {
			hs[i] = bl.BlockHash
		}
		removes[k] = Event{WorkerID: old.WorkerID, Kind: Removed, Removed: hs}
	}
	x := NewIndex()
	x.SetLive(slices.Values(rs))
	ids := make([]uint64, ranks+1)
	step := func(k int) {
		st, rm := &stores[k%ring], &removes[k%ring]
		ids[rm.WorkerID]++
		rm.EventID = ids[rm.WorkerID]
		x.Apply("dynamo", rm)
		ids[st.WorkerID]++
		st.EventID = ids[st.WorkerID]
		if res := x.Apply("dynamo", st); res != Applied {
			b.Fatalf("store: %v", res)
		}
	}
	for k := range 2 * ring { // warm up to the steady size
		step(k)
	}
	st := x.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	for k := range b.N {
		step(k)
	}
	b.StopTimer()
	if end := x.Stats(); end.Nodes != st.Nodes || end.Ownerships != st.Ownerships {
		b.Fatalf("not steady: %d/%d nodes, %d/%d ownerships", st.Nodes, end.Nodes, st.Ownerships, end.Ownerships)
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)*4*half/sec, "blocks/s")
	b.ReportMetric(float64(b.N)*2*half/sec, "stored-blocks/s")
	b.ReportMetric(float64(b.N)*2/sec, "events/s")
}

// BenchmarkFindMatches queries one prompt against an index where 90% of
// the ranks hold a prefix of it (lengths spread evenly from half the
// prompt to all of it) and the rest hold unrelated chains.
func BenchmarkFindMatches(b *testing.B) {
	benchFindMatches(b, func(x *Index, p []uint64, out *Matches) { x.FindMatches(p, out) })
}

// BenchmarkFindMatchesMerge runs the same queries through the previous
// walk (mergeMatcher), the baseline to read BenchmarkFindMatches against
// in the same run.
func BenchmarkFindMatchesMerge(b *testing.B) {
	var mm mergeMatcher
	benchFindMatches(b, func(x *Index, p []uint64, out *Matches) { mm.findMatches(x, p, out) })
}

func benchFindMatches(b *testing.B, find func(*Index, []uint64, *Matches)) {
	for _, c := range []struct{ blocks, ranks int }{{128, 64}, {128, 1000}, {2048, 64}, {2048, 1000}} {
		b.Run(fmt.Sprintf("prompt=%d/ranks=%d", c.blocks, c.ranks), func(b *testing.B) {
			x, prompt, want := sharedPromptIndex(b, c.blocks, c.ranks)
			var out Matches
			find(x, prompt, &out)
			if out.Len() != want || out.Longest() != uint32(c.blocks) {
				b.Fatalf("%d ranks matched (want %d), longest %d", out.Len(), want, out.Longest())
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				find(x, prompt, &out)
			}
		})
	}
	// Churn: before each query one rank drops and stores again a block in
	// the middle of the shared prefix, so the owner sets of that node and
	// of its parent's edge change between queries (two events per query,
	// their cost included).
	b.Run("prompt=128/ranks=1000/churn", func(b *testing.B) {
		x, prompt, _ := sharedPromptIndex(b, 128, 1000)
		r := benchRanks(1000)[1]
		rm := &Event{WorkerID: r.WorkerID, Kind: Removed, Removed: []uint64{1<<32 | 40}}
		st := &Event{WorkerID: r.WorkerID, Kind: Stored, HasParent: true, ParentHash: 1<<32 | 39,
			Blocks: []StoredBlock{{BlockHash: 1<<32 | 40, TokensHash: prompt[40]}}}
		var out Matches
		find(x, prompt, &out)
		b.ReportAllocs()
		b.ResetTimer()
		for k := range b.N {
			ev := rm
			if k%2 == 1 {
				ev = st
			}
			if res := x.Apply("dynamo", ev); res != Applied {
				b.Fatalf("churn: %v", res)
			}
			find(x, prompt, &out)
		}
	})
}

// sharedPromptIndex builds BenchmarkFindMatches' index: rank i holds the
// first blocks/2 + (i+1)·(blocks/2)/ranks blocks of the prompt, under
// engine hashes i<<32 | depth, except every tenth rank, which holds an
// unrelated chain. It returns how many ranks match.
func sharedPromptIndex(b *testing.B, blocks, ranks int) (*Index, []uint64, int) {
	rs := benchRanks(ranks)
	x := NewIndex()
	x.SetLive(slices.Values(rs))
	prompt := make([]uint64, blocks)
	for i := range prompt {
		prompt[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	want := 0
	for i, r := range rs {
		n := blocks/2 + (i+1)*(blocks/2)/ranks
		bs := make([]StoredBlock, n)
		for j := range bs {
			tok := prompt[j]
			if i%10 == 0 {
				tok = ^prompt[j] // unrelated
			}
			bs[j] = StoredBlock{BlockHash: uint64(i)<<32 | uint64(j), TokensHash: tok}
		}
		if i%10 != 0 {
			want++
		}
		if res := x.Apply("dynamo", &Event{WorkerID: r.WorkerID, Kind: Stored, Blocks: bs}); res != Applied {
			b.Fatalf("populate: %v", res)
		}
	}
	return x, prompt, want
}

// traceOp is one step of a Mooncake replay: a request's FindMatches, or an
// event a simulated worker published.
type traceOp struct {
	prompt []uint64
	ev     Event
	find   bool
}

// lruCache is a simulated worker's device cache: engine block hashes in
// least-recently-used order, evicted past a block capacity.
type lruCache struct {
	capacity int
	order    *list.List // front = most recent
	at       map[uint64]*list.Element
}

// mooncakeOps turns the trace into the op stream of a fleet of workers
// with the given per-worker capacity. Requests go round-robin to workers.
// Each request is a FindMatches; the worker that serves it then publishes
// a Removed event for what it evicts and a Stored event for the blocks it
// did not hold, chained under the longest prefix it held. Each hash id is
// one block's tokens_hash; engine hashes are the chained sequence hashes,
// as an engine's are. Evictions take the least recently used block, and a
// request's leaf before its ancestors.
func mooncakeOps(lines [][]uint64, workers, capacity int) []traceOp {
	caches := make([]lruCache, workers)
	for i := range caches {
		caches[i] = lruCache{capacity: capacity, order: list.New(), at: map[uint64]*list.Element{}}
	}
	ids := make([]uint64, workers)
	var ops []traceOp
	for n, h := range lines {
		w := n % workers
		c := &caches[w]
		ops = append(ops, traceOp{prompt: h, find: true})
		seq := SequenceHashes(h)
		held := 0
		for held < len(seq) && c.at[seq[held]] != nil {
			held++
		}
		for i := len(seq) - 1; i >= 0; i-- { // the root ends most recent
			if e := c.at[seq[i]]; e != nil {
				c.order.MoveToFront(e)
			} else {
				c.at[seq[i]] = c.order.PushFront(seq[i])
			}
		}
		var evicted []uint64
		for c.order.Len() > c.capacity {
			e := c.order.Back()
			c.order.Remove(e)
			delete(c.at, e.Value.(uint64))
			evicted = append(evicted, e.Value.(uint64))
		}
		wid := uint64(w) + 1
		if len(evicted) > 0 {
			ids[w]++
			ops = append(ops, traceOp{ev: Event{WorkerID: wid, EventID: ids[w], Kind: Removed, Removed: evicted}})
		}
		if held < len(seq) {
			ev := Event{WorkerID: wid, Kind: Stored}
			if held > 0 {
				ev.HasParent, ev.ParentHash = true, seq[held-1]
			}
			for i := held; i < len(seq); i++ {
				ev.Blocks = append(ev.Blocks, StoredBlock{BlockHash: seq[i], TokensHash: h[i]})
			}
			ids[w]++
			ev.EventID = ids[w]
			ops = append(ops, traceOp{ev: ev})
		}
	}
	return ops
}

func readMooncake(b *testing.B) [][]uint64 {
	f, err := os.Open(traces.Require(b, traces.Mooncake))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var lines [][]uint64
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec struct {
			HashIDs []uint64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			b.Fatalf("line %d: %v", len(lines)+1, err)
		}
		lines = append(lines, rec.HashIDs)
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return lines
}

// matchFunc is a prefix match under test: the index's FindMatches or the
// previous merge walk.
type matchFunc func(x *Index, prompt []uint64, out *Matches)

// replay runs ops against a fresh index, matching with find. It returns
// the blocks of the requests matched by their best worker and, if timed,
// each match's duration.
func replay(tb testing.TB, ops []traceOp, workers int, find matchFunc, timed bool) (matched int, lat []time.Duration) {
	x := NewIndex()
	x.SetLive(slices.Values(benchRanks(workers)))
	var out Matches
	for i := range ops {
		op := &ops[i]
		if !op.find {
			if res := x.Apply("dynamo", &op.ev); res != Applied {
				tb.Fatalf("op %d: %v", i, res)
			}
			continue
		}
		if timed {
			t0 := time.Now()
			find(x, op.prompt, &out)
			lat = append(lat, time.Since(t0))
		} else {
			find(x, op.prompt, &out)
		}
		matched += int(out.Longest())
	}
	return matched, lat
}

// BenchmarkMooncake replays the Mooncake conversation trace (12,031
// requests) through the index as Dynamo's mooncake_bench does: events and
// requests interleaved in one stream, here as fast as one goroutine goes.
// ops/s counts events and requests; the find-p99 metric is one
// FindMatches' 99th-percentile latency over the whole replay.
func BenchmarkMooncake(b *testing.B) {
	benchMooncake(b, func(x *Index, p []uint64, out *Matches) { x.FindMatches(p, out) })
}

// BenchmarkMooncakeMerge replays the same streams matching with the
// previous merge walk (mergeMatcher): the baseline of BenchmarkMooncake in
// the same run.
func BenchmarkMooncakeMerge(b *testing.B) {
	var mm mergeMatcher
	benchMooncake(b, func(x *Index, p []uint64, out *Matches) { mm.findMatches(x, p, out) })
}

func benchMooncake(b *testing.B, find matchFunc) {
	lines := readMooncake(b)
	prompts := 0
	for _, l := range lines {
		prompts += len(l)
	}
	for _, c := range []struct{ workers, capacity int }{{16, 16384}, {256, 16384}, {16, 2048}} {
		b.Run(fmt.Sprintf("workers=%d/capacity=%d", c.workers, c.capacity), func(b *testing.B) {
			ops := mooncakeOps(lines, c.workers, c.capacity)
			var blocks int
			for _, op := range ops {
				blocks += len(op.ev.Blocks) + len(op.ev.Removed)
			}
			replay(b, ops, c.workers, find, false) // warm the CPU caches and the heap
			matched, lat := replay(b, ops, c.workers, find, true)
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3 }
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				replay(b, ops, c.workers, find, false)
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)*float64(len(ops))/sec, "ops/s")
			b.ReportMetric(float64(b.N)*float64(blocks)/sec, "event-blocks/s")
			b.ReportMetric(q(0.50), "find-p50-µs")
			b.ReportMetric(q(0.99), "find-p99-µs")
			b.ReportMetric(q(1), "find-max-µs")
			b.ReportMetric(float64(len(ops)-len(lines)), "events")
			b.ReportMetric(float64(matched)/float64(prompts), "best-match-ratio")
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkFullIndex fills the index to its ceilings (1,048,576 nodes and
// 8,388,608 ownerships: 4 groups of 8 ranks, each rank holding its group's
// 262,144-block chain) and then lets every rank depart. It reports the
// heap the full index holds, the heap one query along every chain adds
// (the match memos of every edge), and the rates of filling and of
// clearing.
func BenchmarkFullIndex(b *testing.B) {
	rs := benchRanks(32)
	bs := make([]StoredBlock, 8192)
	prompt := make([]uint64, MaxBlocksPerRank)
	for range b.N {
		b.StopTimer()
		before := heapInUse()
		x := NewIndex()
		x.SetLive(slices.Values(rs))
		b.StartTimer()
		t0 := time.Now()
		for i, r := range rs {
			g := uint64(i / 8)
			for c := range MaxBlocksPerRank / len(bs) {
				for j := range bs {
					n := uint64(c*len(bs) + j)
					bs[j] = StoredBlock{BlockHash: n + 1, TokensHash: g<<40 | n}
				}
				ev := &Event{WorkerID: r.WorkerID, Kind: Stored, Blocks: bs}
				if c > 0 {
					ev.HasParent, ev.ParentHash = true, uint64(c*len(bs))
				}
				if res := x.Apply("dynamo", ev); res != Applied {
					b.Fatalf("fill: %v", res)
				}
			}
		}
		fill := time.Since(t0)
		b.StopTimer()
		st := x.Stats()
		if st.Nodes != MaxIndexBlocks || st.Ownerships != MaxIndexOwnerships {
			b.Fatalf("filled to %d nodes, %d ownerships", st.Nodes, st.Ownerships)
		}
		heap := heapInUse() - before
		// One query along each group's whole chain memoises every edge:
		// the heap the walk's memos add at most.
		var out Matches
		for g := range uint64(4) {
			for j := range prompt {
				prompt[j] = g<<40 | uint64(j)
			}
			if x.FindMatches(prompt, &out); out.Len() != 8 || out.Longest() != MaxBlocksPerRank {
				b.Fatalf("group %d: %d ranks matched, longest %d", g, out.Len(), out.Longest())
			}
		}
		memos := heapInUse() - before - heap
		b.StartTimer()
		t0 = time.Now()
		x.SetLive(slices.Values([]Rank(nil)))
		clearing := time.Since(t0)
		b.StopTimer()
		if st := x.Stats(); st.Nodes != 0 || st.Ownerships != 0 {
			b.Fatalf("after clearing: %+v", st)
		}
		b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(memos)/(1<<20), "memo-MiB")
		b.ReportMetric(MaxIndexOwnerships/fill.Seconds(), "fill-blocks/s")
		b.ReportMetric(MaxIndexOwnerships/clearing.Seconds(), "clear-blocks/s")
		b.StartTimer()
	}
}
