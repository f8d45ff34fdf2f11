package engine

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func tokens(n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(i)
	}
	return t
}

func TestMockerPolynomials(t *testing.T) {
	m := Mocker{}
	if m.PrefillTime(0) != 0 {
		t.Fatal("nothing to prefill must cost nothing")
	}
	if got := m.PrefillTime(1000); got.Round(time.Microsecond) != 32106*time.Microsecond {
		t.Fatalf("prefill(1000) = %v", got)
	}
	if got := m.DecodeStepTime(0); got != 5740*time.Microsecond {
		t.Fatalf("decode(0) = %v", got)
	}
	if got := m.DecodeStepTime(1); got.Round(time.Microsecond) != 34010*time.Microsecond {
		t.Fatalf("decode(1) = %v", got)
	}
	if got := m.DecodeStepTime(-1); got != time.Millisecond {
		t.Fatalf("floor: %v", got)
	}
}

func TestStepTimingAndOutputs(t *testing.T) {
	e := New(Config{BlockSize: 4, TotalKVBlocks: 8, SpeedupRatio: 2,
		Timing: Constant{Prefill: 20 * time.Millisecond, Step: 4 * time.Millisecond}})
	e.Submit(Request{ID: 7, Tokens: tokens(8), MaxTokens: 3}, t0)
	if at, ok := e.NextEvent(); !ok || !at.Equal(t0) {
		t.Fatalf("planning point = %v %v", at, ok)
	}
	if out := e.Advance(t0); len(out) != 0 {
		t.Fatalf("planning emitted %v", out)
	}
	want := []struct {
		at  time.Duration
		out Output
	}{
		{10 * time.Millisecond, Output{RequestID: 7, NewTokens: 1, FirstToken: true}},
		{12 * time.Millisecond, Output{RequestID: 7, NewTokens: 1}},
		{14 * time.Millisecond, Output{RequestID: 7, NewTokens: 1, Finished: true}},
	}
	for _, w := range want {
		at, ok := e.NextEvent()
		if !ok || !at.Equal(t0.Add(w.at)) {
			t.Fatalf("next = %v, want +%v", at.Sub(t0), w.at)
		}
		if out := e.Advance(at.Add(-time.Nanosecond)); out != nil {
			t.Fatalf("early advance emitted %v", out)
		}
		if out := e.Advance(at); !slices.Equal(out, []Output{w.out}) {
			t.Fatalf("+%v: %v", w.at, out)
		}
	}
	if _, ok := e.NextEvent(); ok {
		t.Fatal("engine should be idle")
	}
	if used, dec, pre := e.Load(); used != 0 || dec != 0 || pre != 0 {
		t.Fatalf("load after finish = %d %d %d", used, dec, pre)
	}
}

func TestChunkedPrefill(t *testing.T) {
	e := New(Config{BlockSize: 4, TotalKVBlocks: 8, MaxNumBatchedTokens: 4, Timing: Constant{Prefill: time.Millisecond}})
	e.Submit(Request{ID: 1, Tokens: tokens(10), MaxTokens: 1}, t0)
	e.Advance(t0)
	// The chunk in flight is not computed yet, so all 10 tokens count.
	if _, _, pre := e.Load(); pre != 10 {
		t.Fatalf("%d prefill tokens pending, want 10", pre)
	}
	var out []Output
	for i := 0; i < 3; i++ {
		at, _ := e.NextEvent()
		out = append(out, e.Advance(at)...)
	}
	if !slices.Equal(out, []Output{{RequestID: 1, NewTokens: 1, FirstToken: true, Finished: true}}) {
		t.Fatalf("outputs %v", out)
	}
	if s := e.Stats(); s.Steps != 3 || s.PrefillTokens != 10 {
		t.Fatalf("stats %+v", s)
	}
}

func runAll(e *Engine) []Output {
	var out []Output
	for {
		at, ok := e.NextEvent()
		if !ok {
			return out
		}
		out = append(out, e.Advance(at)...)
	}
}

func TestPrefixCachingEvents(t *testing.T) {
	e := New(Config{BlockSize: 4, TotalKVBlocks: 16, Timing: Constant{Prefill: time.Millisecond, Step: time.Millisecond}})
	e.Submit(Request{ID: 1, Tokens: tokens(9), MaxTokens: 2}, t0)
	runAll(e)
	ev := e.DrainKVEvents()
	// tokens_hash values are the router vectors of dynamo-wire.md §10.
	want := KVEvent{EventID: 1, Kind: Stored, Blocks: []StoredBlock{
		{BlockHash: 9143094415614847814, TokensHash: 9143094415614847814},
		{BlockHash: 9510318385840434533, TokensHash: 12124091508212882195},
	}}
	if len(ev) != 1 || ev[0].ParentHash != nil || !slices.Equal(ev[0].Blocks, want.Blocks) || ev[0].EventID != 1 {
		t.Fatalf("events %+v", ev)
	}
	before := e.Stats()
	e.Submit(Request{ID: 2, Tokens: tokens(13), MaxTokens: 1}, t0.Add(time.Second))
	outs := runAll(e)
	after := e.Stats()
	if len(outs) != 1 || !outs[0].FirstToken || outs[0].CachedTokens != 8 {
		t.Fatalf("first-token output %+v, want CachedTokens 8", outs)
	}
	if got := after.CachedTokens - before.CachedTokens; got != 8 {
		t.Fatalf("cached %d tokens, want 8", got)
	}
	if got := after.PrefillTokens - before.PrefillTokens; got != 5 {
		t.Fatalf("prefilled %d tokens, want 5", got)
	}
	ev = e.DrainKVEvents()
	if len(ev) != 1 || ev[0].EventID != 2 || ev[0].ParentHash == nil || *ev[0].ParentHash != 9510318385840434533 || len(ev[0].Blocks) != 1 {
		t.Fatalf("second store %+v", ev)
	}
}

func TestLRUEvictionEmitsRemoved(t *testing.T) {
	e := New(Config{BlockSize: 2, TotalKVBlocks: 3, Timing: Constant{Prefill: time.Millisecond, Step: time.Millisecond}})
	e.Submit(Request{ID: 1, Tokens: []uint32{1, 2, 3, 4}, MaxTokens: 1}, t0)
	runAll(e)
	e.Submit(Request{ID: 2, Tokens: []uint32{5, 6, 7, 8}, MaxTokens: 1}, t0.Add(time.Second))
	runAll(e)
	ev := e.DrainKVEvents()
	var kinds []Kind
	for _, x := range ev {
		kinds = append(kinds, x.Kind)
	}
	// Request 1 left two cached blocks; request 2 needs two, one is free,
	// so the LRU tail (request 1's deeper block) is evicted.
	if !slices.Equal(kinds, []Kind{Stored, Removed, Stored}) || !slices.Equal(ev[1].Removed, []uint64{ev[0].Blocks[1].BlockHash}) {
		t.Fatalf("events %+v", ev)
	}
}

func TestPreemptionLIFO(t *testing.T) {
	e := New(Config{BlockSize: 2, TotalKVBlocks: 4, Timing: Constant{Prefill: time.Millisecond, Step: time.Millisecond}})
	e.Submit(Request{ID: 1, Tokens: []uint32{1, 2}, MaxTokens: 5}, t0)
	e.Submit(Request{ID: 2, Tokens: []uint32{3, 4}, MaxTokens: 5}, t0)
	out := runAll(e)
	got := map[uint64]int{}
	preempted := 0
	for _, o := range out {
		got[o.RequestID] += o.NewTokens
		if o.Preempted {
			preempted++
			if o.RequestID != 2 {
				t.Fatalf("LIFO must preempt the newest request, got %d", o.RequestID)
			}
		}
	}
	if preempted == 0 || got[1] != 5 || got[2] != 5 {
		t.Fatalf("preempted %d, tokens %v", preempted, got)
	}
}

func TestResetAndReject(t *testing.T) {
	e := New(Config{BlockSize: 2, TotalKVBlocks: 2, Timing: Constant{Prefill: time.Millisecond, Step: time.Millisecond}})
	e.Submit(Request{ID: 9, Tokens: tokens(4), MaxTokens: 2}, t0)
	if out := e.Advance(t0); !slices.Equal(out, []Output{{RequestID: 9, Finished: true, Rejected: true, Reason: RejectKVCache}}) {
		t.Fatalf("reject: %v", out)
	}
	e.Submit(Request{ID: 1, Tokens: tokens(2), MaxTokens: 2}, t0)
	e.Advance(t0)
	e.Reset()
	if _, ok := e.NextEvent(); ok {
		t.Fatal("reset must idle the engine")
	}
	ev := e.DrainKVEvents()
	if last := ev[len(ev)-1]; last.Kind != Cleared {
		t.Fatalf("events %+v", ev)
	}
	if used, _, _ := e.Load(); used != 0 {
		t.Fatal("reset must free every block")
	}
}

func TestImportedPromptIsNotComputedAgain(t *testing.T) {
	timing := Constant{Prefill: time.Millisecond, Step: time.Millisecond}
	e := New(Config{BlockSize: 4, TotalKVBlocks: 16, Timing: timing})
	e.Submit(Request{ID: 1, Tokens: tokens(9), MaxTokens: 2, Imported: 9}, t0)
	at, _ := e.NextEvent()
	outs := e.Advance(at)
	at, _ = e.NextEvent()
	outs = append(outs, e.Advance(at)...)
	if len(outs) != 1 || !outs[0].FirstToken || outs[0].CachedTokens != 0 {
		t.Fatalf("first step outputs %+v", outs)
	}
	// One prompt token was computed; the other eight arrived with the KV.
	if st := e.Stats(); st.PrefillTokens != 1 || st.CachedTokens != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The imported blocks are cached like computed ones: a later request
	// with the same prefix hits them.
	if ev := e.DrainKVEvents(); len(ev) != 1 || len(ev[0].Blocks) != 2 {
		t.Fatalf("events %+v", ev)
	}
	runAll(e)
	e.Submit(Request{ID: 2, Tokens: tokens(13), MaxTokens: 1}, t0.Add(time.Second))
	if outs := runAll(e); len(outs) != 1 || outs[0].CachedTokens != 8 {
		t.Fatalf("second request %+v", outs)
	}
}
