package engineworker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/engine"
	"switchyard/fakefleet/engineworker"
	"switchyard/router/clock"
)

var t0 = time.Unix(1_700_000_000, 0)

// run starts Generate in the background, passing each word to the
// returned channel; the result arrives on the second.
func run(w *engineworker.Worker, ctx context.Context, req engineworker.Request) (<-chan string, <-chan error) {
	words, done := make(chan string, 64), make(chan error, 1)
	go func() {
		_, err := w.Generate(ctx, req, func(s string) error { words <- s; return nil })
		done <- err
	}()
	return words, done
}

func recv[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("timed out")
	}
	var zero T
	return zero
}

func quiet[T any](t *testing.T, c <-chan T) {
	t.Helper()
	select {
	case v := <-c:
		t.Fatalf("unexpected %v", v)
	case <-time.After(20 * time.Millisecond):
	}
}

// TestStepTimingSlowAndStall checks the driver follows the engine's step
// times on the clock, that SetSlow stretches decode steps in wall time, and
// that a stall freezes engine time rather than bursting on resume.
func TestStepTimingSlowAndStall(t *testing.T) {
	clk := clock.NewManual(t0)
	w := engineworker.New(engineworker.Config{BlockSize: 4, TotalKVBlocks: 16, SpeedupRatio: 2,
		Timing: engine.Constant{Prefill: 10 * time.Millisecond, Step: 4 * time.Millisecond}}, clk)
	defer w.Close()
	w.SetSlow(3 * time.Millisecond)
	words, done := run(w, context.Background(), engineworker.Request{PromptTokens: 8, Seed: 1, MaxTokens: 3})

	// Prefill: 10ms / 2.
	require.True(t, clk.WaitForTimers(1, nil))
	clk.Advance(5*time.Millisecond - time.Nanosecond)
	quiet(t, words)
	clk.Advance(time.Nanosecond)
	recv(t, words)

	// Decode: 4ms / 2 + 3ms of injected slowness.
	require.True(t, clk.WaitForTimers(1, nil))
	clk.Advance(5*time.Millisecond - time.Nanosecond)
	quiet(t, words)

	// Stalled across the deadline: nothing, and the time spent stalled
	// does not count against the step.
	w.SetStalled(true)
	clk.Advance(time.Second)
	quiet(t, words)
	w.SetStalled(false)
	require.True(t, clk.WaitForTimers(1, nil))
	quiet(t, words)
	clk.Advance(time.Nanosecond)
	recv(t, words)

	require.True(t, clk.WaitForTimers(1, nil))
	clk.Advance(5 * time.Millisecond)
	recv(t, words)
	require.NoError(t, recv(t, done))
	require.Equal(t, engineworker.Load{}, w.Load(0))
}

// TestSlowFactorScalesDecodeSteps checks SetSlowFactor multiplies decode
// steps while prefill steps keep their time.
func TestSlowFactorScalesDecodeSteps(t *testing.T) {
	clk := clock.NewManual(t0)
	w := engineworker.New(engineworker.Config{BlockSize: 4, TotalKVBlocks: 16, SpeedupRatio: 2,
		Timing: engine.Constant{Prefill: 10 * time.Millisecond, Step: 4 * time.Millisecond}}, clk)
	defer w.Close()
	w.SetSlowFactor(3)
	words, done := run(w, context.Background(), engineworker.Request{PromptTokens: 8, Seed: 1, MaxTokens: 3})

	// Prefill: 10ms / 2, not slowed.
	require.True(t, clk.WaitForTimers(1, nil))
	clk.Advance(5*time.Millisecond - time.Nanosecond)
	quiet(t, words)
	clk.Advance(time.Nanosecond)
	recv(t, words)

	// Decode: 3 × 4ms / 2.
	require.True(t, clk.WaitForTimers(1, nil))
	clk.Advance(6*time.Millisecond - time.Nanosecond)
	quiet(t, words)
	clk.Advance(time.Nanosecond)
	recv(t, words)

	require.True(t, clk.WaitForTimers(1, nil))
	clk.Advance(6 * time.Millisecond)
	recv(t, words)
	require.NoError(t, recv(t, done))
}

func TestFaultsAndErrors(t *testing.T) {
	w := engineworker.New(engineworker.Config{BlockSize: 4, TotalKVBlocks: 4, DPSize: 2, Timing: fast}, clock.Real{})
	defer w.Close()
	ctx := context.Background()

	w.SetFailing(true)
	_, err := w.Generate(ctx, engineworker.Request{PromptTokens: 4, MaxTokens: 1}, nil)
	require.ErrorIs(t, err, engineworker.ErrInjected5xx)
	w.SetFailing(false)

	_, err = w.Generate(ctx, engineworker.Request{DPRank: 2, PromptTokens: 4, MaxTokens: 1}, nil)
	require.ErrorIs(t, err, engineworker.ErrRankRange)
	_, err = w.Generate(ctx, engineworker.Request{PromptTokens: -1}, nil)
	require.ErrorIs(t, err, engineworker.ErrInvalid)
	_, err = w.Generate(ctx, engineworker.Request{PromptTokens: 16, MaxTokens: 1}, nil)
	require.ErrorIs(t, err, engineworker.ErrTooLarge, "17 tokens need 5 of 4 blocks")

	res, err := w.Generate(ctx, engineworker.Request{DPRank: 1, PromptTokens: 5, MaxTokens: 2}, nil)
	require.NoError(t, err)
	require.Equal(t, 2, res.CompletionTokens)
}

// TestCancelLeavesRequestInEngine pins the documented limit: the engine
// cannot cancel, so an abandoned request holds load until it finishes.
func TestCancelLeavesRequestInEngine(t *testing.T) {
	w := engineworker.New(engineworker.Config{BlockSize: 4, TotalKVBlocks: 16, Timing: fast}, clock.Real{})
	defer w.Close()
	w.SetStalled(true)
	ctx, cancel := context.WithCancel(context.Background())
	_, done := run(w, ctx, engineworker.Request{PromptTokens: 8, MaxTokens: 2})
	require.Eventually(t, func() bool { return w.Load(0).ActivePrefillTokens == 8 }, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, recv(t, done), context.Canceled)
	require.Equal(t, uint64(8), w.Load(0).ActivePrefillTokens, "still queued in the engine")
	w.SetStalled(false)
	require.Eventually(t, func() bool { return w.Load(0) == engineworker.Load{} }, 5*time.Second, time.Millisecond)
}

func TestSyntheticPromptsShareSeedPrefix(t *testing.T) {
	a := engineworker.SyntheticPrompt(40, 7)
	require.Equal(t, a, engineworker.SyntheticPrompt(40, 7))
	require.Equal(t, a[:24], engineworker.SyntheticPrompt(24, 7))
	require.False(t, slices.Equal(a, engineworker.SyntheticPrompt(40, 8)))
}

// Close returns while a rank is busy with a step already due: the driver
// must not keep retrying the step a closed worker refuses. The driver is
// held in its first step's KV-event delivery while the clock passes the
// next step's time and the worker closes.
func TestCloseWhileBusy(t *testing.T) {
	clk := clock.NewManual(t0)
	w := engineworker.New(engineworker.Config{BlockSize: 16, TotalKVBlocks: 1024,
		Timing: engine.Constant{Prefill: time.Millisecond, Step: time.Millisecond}}, clk)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	w.OnKVEvents(func(uint32, []engine.KVEvent) {
		once.Do(func() {
			close(held)
			<-release
		})
	})
	done := make(chan error, 1)
	go func() {
		_, err := w.Generate(context.Background(), engineworker.Request{PromptTokens: 32, MaxTokens: 1000},
			func(string) error { return nil })
		done <- err
	}()
	recv(t, held)
	clk.Advance(time.Second)

	closed := make(chan struct{})
	go func() {
		w.Close()
		close(closed)
	}()
	require.ErrorIs(t, recv(t, done), engineworker.ErrClosed, "closed with the request in flight")
	close(release)
	recv(t, closed)
}
