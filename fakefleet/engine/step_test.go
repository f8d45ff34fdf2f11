package engine

import (
	"slices"
	"testing"
	"time"
)

// stepLog is a Timing that records each step's shape (copied, since the
// engine reuses the slices) and charges a constant.
type stepLog struct {
	steps []Step
}

func (l *stepLog) StepTime(s Step) time.Duration {
	s.Prefill, s.Decode = slices.Clone(s.Prefill), slices.Clone(s.Decode)
	l.steps = append(l.steps, s)
	return time.Millisecond
}

func TestStepShapeCarriesChunksAndContexts(t *testing.T) {
	log := &stepLog{}
	e := New(Config{BlockSize: 4, TotalKVBlocks: 32, MaxNumBatchedTokens: 6, Timing: log})
	// Request 1: a 10-token prompt, chunked 6 + 4, then two decodes.
	e.Submit(Request{ID: 1, Tokens: tokens(10), MaxTokens: 3}, t0)
	runAll(e)
	want := []Step{
		{Prefill: []Chunk{{NewTokens: 6, Context: 0}}, PrefillTokens: 6},
		{Prefill: []Chunk{{NewTokens: 4, Context: 6}}, PrefillTokens: 4},
		{Decode: []int{10}, DecodeContext: 10},
		{Decode: []int{11}, DecodeContext: 11},
	}
	checkSteps(t, log.steps, want)

	// Request 2 shares request 1's first two blocks (8 tokens): its chunk
	// computes only the rest, attending to the cached 8.
	log.steps = nil
	e.Submit(Request{ID: 2, Tokens: tokens(12), MaxTokens: 1}, t0.Add(time.Second))
	runAll(e)
	checkSteps(t, log.steps, []Step{{Prefill: []Chunk{{NewTokens: 4, Context: 8}}, PrefillTokens: 4}})
}

func TestStepShapeMixesPrefillAndDecode(t *testing.T) {
	log := &stepLog{}
	e := New(Config{BlockSize: 4, TotalKVBlocks: 32, Timing: log})
	e.Submit(Request{ID: 1, Tokens: tokens(5), MaxTokens: 3}, t0)
	at, _ := e.NextEvent()
	e.Advance(at) // plans the prefill
	at, _ = e.NextEvent()
	e.Submit(Request{ID: 2, Tokens: []uint32{9, 9, 9}, MaxTokens: 1}, at)
	runAll(e)
	if len(log.steps) < 2 {
		t.Fatalf("steps %+v", log.steps)
	}
	got := log.steps[1]
	if !slices.Equal(got.Decode, []int{5}) || !slices.Equal(got.Prefill, []Chunk{{NewTokens: 3}}) ||
		got.PrefillTokens != 3 || got.DecodeContext != 5 {
		t.Fatalf("mixed step %+v", got)
	}
	if got.KVFraction <= 0 || got.KVFraction > 1 {
		t.Fatalf("KV fraction %v", got.KVFraction)
	}
}

func checkSteps(t *testing.T, got, want []Step) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d steps, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if !slices.Equal(g.Prefill, w.Prefill) || !slices.Equal(g.Decode, w.Decode) ||
			g.PrefillTokens != w.PrefillTokens || g.DecodeContext != w.DecodeContext {
			t.Fatalf("step %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestSplitMatchesThePhaseParts(t *testing.T) {
	m := Mocker{}
	s := Step{Prefill: []Chunk{{NewTokens: 700, Context: 300}}, PrefillTokens: 700, Decode: []int{40}, KVFraction: 0.25}
	if got, want := m.StepTime(s), m.PrefillTime(700)+m.DecodeStepTime(0.25); got != want {
		t.Fatalf("mixed step %v, want %v", got, want)
	}
	if got := m.StepTime(Step{PrefillTokens: 100, Prefill: []Chunk{{NewTokens: 100}}, KVFraction: 0.9}); got != m.PrefillTime(100) {
		t.Fatalf("prefill-only step %v: decode must not be charged", got)
	}
}
