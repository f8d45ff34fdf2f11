package engineworker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/engine"
	"switchyard/fakefleet/engineworker"
	"switchyard/router/clock"
)

// TestKVTransferWaitsOnClock checks a decode hop reaches the engine only
// after its blocks' transfer time, scaled by the speedup.
func TestKVTransferWaitsOnClock(t *testing.T) {
	clk := clock.NewManual(t0)
	w := engineworker.New(engineworker.Config{BlockSize: 4, TotalKVBlocks: 16, SpeedupRatio: 2,
		KVTransferBandwidth: 1e6, KVBytesPerBlock: 1000,
		Timing: engine.Constant{Prefill: 10 * time.Millisecond, Step: 4 * time.Millisecond}}, clk)
	defer w.Close()
	// 5 tokens round up to 2 blocks: 2000 B at 1 MB/s is 2 ms, 1 ms at 2x.
	require.Equal(t, time.Millisecond, w.TransferTime(5))
	require.Zero(t, w.TransferTime(0))

	words, done := run(w, context.Background(), engineworker.Request{PromptTokens: 8, Seed: 1, MaxTokens: 1, CachedTokens: 5})
	require.True(t, clk.WaitForTimers(1, nil))
	clk.Advance(time.Millisecond - time.Nanosecond)
	quiet(t, words)
	require.Equal(t, engineworker.Load{}, w.Load(0), "not submitted during the transfer")

	clk.Advance(time.Nanosecond)
	// The 5 transferred tokens are imported: 3 remain to compute.
	require.Eventually(t, func() bool { return w.Load(0).ActivePrefillTokens == 3 }, 5*time.Second, time.Millisecond)
	require.True(t, clk.WaitForTimers(1, nil))
	clk.Advance(5 * time.Millisecond) // the prefill step, 10ms / 2
	recv(t, words)
	require.NoError(t, recv(t, done))
}

func TestKVTransferHonoursContextAndFaults(t *testing.T) {
	clk := clock.NewManual(t0)
	w := engineworker.New(engineworker.Config{BlockSize: 4, TotalKVBlocks: 16, KVTransferBandwidth: 1,
		Timing: fast}, clk)
	defer w.Close()

	ctx, cancel := context.WithCancel(context.Background())
	_, done := run(w, ctx, engineworker.Request{PromptTokens: 8, MaxTokens: 1, CachedTokens: 8})
	require.True(t, clk.WaitForTimers(1, nil))
	cancel()
	require.ErrorIs(t, recv(t, done), context.Canceled)
	require.Equal(t, engineworker.Load{}, w.Load(0))

	// Refusals come before the transfer, not after it.
	w.SetFailing(true)
	_, err := w.Generate(context.Background(), engineworker.Request{PromptTokens: 8, CachedTokens: 8}, nil)
	require.ErrorIs(t, err, engineworker.ErrInjected5xx)
	w.SetFailing(false)
	_, err = w.Generate(context.Background(), engineworker.Request{DPRank: 1, PromptTokens: 8, CachedTokens: 8}, nil)
	require.ErrorIs(t, err, engineworker.ErrRankRange)
	_, err = w.Generate(context.Background(), engineworker.Request{PromptTokens: 8, CachedTokens: -1}, nil)
	require.ErrorIs(t, err, engineworker.ErrInvalid)
}

type rankEvent struct {
	rank uint32
	ev   engine.KVEvent
}

// TestResetClearsEveryRank checks Reset fails in-flight requests, zeroes
// Load at once, and publishes each rank's Cleared after its earlier events.
func TestResetClearsEveryRank(t *testing.T) {
	clk := clock.NewManual(t0)
	w := engineworker.New(engineworker.Config{BlockSize: 4, TotalKVBlocks: 16, DPSize: 2,
		Timing: engine.Constant{Prefill: 10 * time.Millisecond, Step: 4 * time.Millisecond}}, clk)
	defer w.Close()
	evs := make(chan rankEvent, 64)
	w.OnKVEvents(func(r uint32, es []engine.KVEvent) {
		for _, e := range es {
			evs <- rankEvent{r, e}
		}
	})

	words, done := run(w, context.Background(), engineworker.Request{PromptTokens: 8, Seed: 1, MaxTokens: 5})
	require.True(t, clk.WaitForTimers(1, nil))
	clk.Advance(10 * time.Millisecond)
	recv(t, words) // prefill done: its blocks are stored
	stored := recv(t, evs)
	require.Equal(t, uint32(0), stored.rank)
	require.Equal(t, engine.Stored, stored.ev.Kind)

	w.Reset()
	require.Equal(t, engineworker.Load{}, w.Load(0))
	require.Equal(t, engineworker.Load{}, w.Load(1))
	require.ErrorIs(t, recv(t, done), engineworker.ErrReset)

	cleared := map[uint32]engine.KVEvent{}
	for len(cleared) < 2 {
		e := recv(t, evs)
		require.Equal(t, engine.Cleared, e.ev.Kind, "nothing but Cleared after the Stored")
		cleared[e.rank] = e.ev
	}
	require.Greater(t, cleared[0].EventID, stored.ev.EventID)

	// The fresh engine serves, recomputing the prompt it forgot. First let
	// the driver drop its timer for the decode step the reset cancelled.
	require.Eventually(t, func() bool { return clk.Pending() == 0 }, 5*time.Second, time.Millisecond)
	words, done = run(w, context.Background(), engineworker.Request{PromptTokens: 8, Seed: 1, MaxTokens: 1})
	require.True(t, clk.WaitForTimers(1, nil))
	clk.Advance(10 * time.Millisecond)
	recv(t, words)
	require.NoError(t, recv(t, done))
	require.Equal(t, engine.Stored, recv(t, evs).ev.Kind, "stored again: the cache was really dropped")

	// A stalled worker still publishes its reset.
	w.SetStalled(true)
	w.Reset()
	for range 2 {
		require.Equal(t, engine.Cleared, recv(t, evs).ev.Kind)
	}
}
