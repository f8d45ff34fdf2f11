package engine

import (
	"slices"
	"testing"
	"time"
)

var fixed = Constant{Prefill: time.Millisecond, Step: time.Millisecond}

func TestMaxModelLenRejects(t *testing.T) {
	e := New(Config{BlockSize: 4, TotalKVBlocks: 64, MaxModelLen: 12, Timing: fixed})
	e.Submit(Request{ID: 1, Tokens: tokens(10), MaxTokens: 3}, t0) // 13 > 12
	e.Submit(Request{ID: 2, Tokens: tokens(10), MaxTokens: 2}, t0) // exactly 12
	out := runAll(e)
	if out[0] != (Output{RequestID: 1, Finished: true, Rejected: true, Reason: RejectMaxModelLen}) {
		t.Fatalf("first output %+v, want request 1 rejected for its length", out[0])
	}
	if last := out[len(out)-1]; last.RequestID != 2 || !last.Finished || last.Rejected {
		t.Fatalf("request 2 at the limit must run: %+v", out)
	}
}

func TestPrefixCachingDisabled(t *testing.T) {
	e := New(Config{BlockSize: 4, TotalKVBlocks: 64, DisablePrefixCaching: true, Timing: fixed})
	e.Submit(Request{ID: 1, Tokens: tokens(12), MaxTokens: 2}, t0)
	runAll(e)
	e.Submit(Request{ID: 2, Tokens: tokens(12), MaxTokens: 1}, t0.Add(time.Second))
	out := runAll(e)
	if len(out) != 1 || out[0].CachedTokens != 0 {
		t.Fatalf("second identical prompt %+v: nothing may be cached", out)
	}
	if st := e.Stats(); st.CachedTokens != 0 || st.PrefillTokens != 24 {
		t.Fatalf("stats %+v, want both prompts computed in full", st)
	}
	if ev := e.DrainKVEvents(); len(ev) != 0 {
		t.Fatalf("events %+v: no block is registered without prefix caching", ev)
	}
	if used, _, _ := e.Load(); used != 0 {
		t.Fatalf("%d blocks still held", used)
	}
}

func TestChunkedPrefillDisabled(t *testing.T) {
	log := &stepLog{}
	e := New(Config{BlockSize: 4, TotalKVBlocks: 64, MaxNumBatchedTokens: 8, DisableChunkedPrefill: true, Timing: log})
	e.Submit(Request{ID: 1, Tokens: tokens(6), MaxTokens: 2}, t0)
	e.Submit(Request{ID: 2, Tokens: []uint32{7, 7, 7, 7, 7}, MaxTokens: 1}, t0)
	e.Submit(Request{ID: 3, Tokens: tokens(8), MaxTokens: 1}, t0) // 9 > budget 8
	out := runAll(e)
	if !slices.Contains(out, Output{RequestID: 3, Finished: true, Rejected: true, Reason: RejectBatchBudget}) {
		t.Fatalf("outputs %+v: request 3 cannot fit one step", out)
	}
	// Request 2's 5 tokens do not fit the 2 left after request 1's 6, and
	// are not split: it waits for the next step.
	want := []Step{
		{Prefill: []Chunk{{NewTokens: 6}}, PrefillTokens: 6},
		{Decode: []int{6}, DecodeContext: 6, Prefill: []Chunk{{NewTokens: 5}}, PrefillTokens: 5},
	}
	checkSteps(t, log.steps, want)
}
