package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"switchyard/router/clock"
)

// How a generated request ends.
const (
	endFinish       = iota // runs to MaxTokens
	endCancelBefore        // context cancelled before Generate
	endCancelAtTok         // cancelled from inside emit after some tokens
	endEmitError           // emit fails after some tokens
	endCancelLater         // cancelled after a random wall-clock delay
	numEnds
)

var errStopEmit = errors.New("stop")

// Over random configurations and request mixes, each request finishing or
// ending early in any state (queued, prefilling, decoding, stalled), the
// scheduler's limits hold at every change and every rank ends empty: no
// leaked blocks, backlog, queue places or running slots.
func TestNoLeaksProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := Config{
			BlockSize:           rapid.IntRange(1, 8).Draw(rt, "block"),
			TotalKVBlocks:       rapid.IntRange(1, 24).Draw(rt, "blocks"),
			MaxNumBatchedTokens: rapid.IntRange(1, 32).Draw(rt, "batched"),
			MaxNumSeqs:          rapid.IntRange(1, 4).Draw(rt, "seqs"),
			DPSize:              rapid.IntRange(1, 3).Draw(rt, "dp"),
			// Fast enough that a step is microseconds on the wall clock.
			SpeedupRatio: 1e4,
		}
		w := New(cfg, clock.Real{})
		var violation sync.Once
		var bad string
		w.OnChange(func(r uint32) {
			w.mu.Lock()
			rk := *w.ranks[r]
			w.mu.Unlock()
			if rk.running > cfg.MaxNumSeqs || rk.reserved > cfg.TotalKVBlocks || rk.held > uint64(rk.reserved) {
				violation.Do(func() { bad = "limits exceeded" })
			}
		})

		stallAt := rapid.IntRange(-1, 500).Draw(rt, "stall_at_us")
		n := rapid.IntRange(1, 16).Draw(rt, "requests")
		var wg sync.WaitGroup
		for range n {
			req := Request{
				DPRank:       uint32(rapid.IntRange(0, cfg.DPSize).Draw(rt, "rank")), // DPSize itself is out of range
				PromptTokens: rapid.IntRange(0, 40).Draw(rt, "prompt"),
				MaxTokens:    rapid.IntRange(0, 8).Draw(rt, "max"),
			}
			req.CachedTokens = rapid.IntRange(0, req.PromptTokens).Draw(rt, "cached")
			end := rapid.IntRange(0, numEnds-1).Draw(rt, "end")
			after := rapid.IntRange(0, 8).Draw(rt, "after")
			wg.Add(1)
			go func() {
				defer wg.Done()
				runOne(w, req, end, after)
			}()
		}
		if stallAt >= 0 {
			// A stall of a few hundred microseconds somewhere in the run.
			time.Sleep(time.Duration(stallAt) * time.Microsecond)
			w.SetStalled(true)
			time.Sleep(200 * time.Microsecond)
			w.SetStalled(false)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			rt.Fatal("requests did not end")
		}
		if bad != "" {
			rt.Fatal(bad)
		}
		for r := range cfg.DPSize {
			w.mu.Lock()
			rk := *w.ranks[r]
			w.mu.Unlock()
			if rk.load() != (Load{}) || rk.running != 0 || rk.reserved != 0 || len(rk.queue) != 0 {
				rt.Fatalf("rank %d not empty: %+v", r, rk)
			}
		}
	})
}

func runOne(w *Worker, req Request, end, after int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tokens := 0
	emit := func(string) error {
		tokens++
		switch {
		case end == endCancelAtTok && tokens > after:
			cancel()
		case end == endEmitError && tokens > after:
			return errStopEmit
		}
		return nil
	}
	switch end {
	case endCancelBefore:
		cancel()
	case endCancelLater:
		t := time.AfterFunc(time.Duration(after*20)*time.Microsecond, cancel)
		defer t.Stop()
	}
	_, _ = w.Generate(ctx, req, emit)
}
