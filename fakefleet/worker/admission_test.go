package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/clock"
)

// At MaxNumSeqs a rank queues: the queued prompt shows as prefill backlog
// but holds no blocks, and it starts when the running request ends.
func TestQueuesAtMaxNumSeqs(t *testing.T) {
	m := clock.NewManual(t0)
	w := New(Config{BlockSize: 16, TotalKVBlocks: 100, MaxNumSeqs: 1}, m)
	a := start(w, Request{PromptTokens: 16, MaxTokens: 2})
	waitTimers(t, m, 1)
	b := start(w, Request{PromptTokens: 32, MaxTokens: 1})
	eventually(t, func() bool { return queued(w, 0) == 1 }, "b queues")
	assert.Equal(t, Load{KVUsedBlocks: 1, ActiveDecodeBlocks: 1, ActivePrefillTokens: 48}, w.Load(0))
	assert.Equal(t, 1, m.Pending(), "only a runs")

	_, err := finish(t, m, a, 3)
	require.NoError(t, err)
	waitTimers(t, m, 1)
	assert.Equal(t, Load{KVUsedBlocks: 2, ActiveDecodeBlocks: 2, ActivePrefillTokens: 32}, w.Load(0))
	drive(t, m, b)
	assert.Equal(t, Load{}, w.Load(0))
}

// The KV budget reserves prompt plus max tokens per request; the queue is
// first come first served, so a small request does not overtake a large
// one waiting for blocks.
func TestQueuesAtTotalKVBlocks(t *testing.T) {
	m := clock.NewManual(t0)
	w := New(Config{BlockSize: 16, TotalKVBlocks: 4}, m)
	a := start(w, Request{PromptTokens: 32, MaxTokens: 16}) // 3 blocks
	waitTimers(t, m, 1)
	b := start(w, Request{PromptTokens: 16, MaxTokens: 16}) // 2: does not fit
	eventually(t, func() bool { return queued(w, 0) == 1 }, "b queues")
	c := start(w, Request{MaxTokens: 16}) // 1 would fit, but b is first
	eventually(t, func() bool { return queued(w, 0) == 2 }, "c queues behind b")
	assert.Equal(t, 1, running(w, 0))

	_, err := finish(t, m, a, 17)
	require.NoError(t, err)
	assert.Equal(t, 2, running(w, 0), "b and c start together")
	drive(t, m, b, c)
	assert.Equal(t, Load{}, w.Load(0))
}

// Cancelling frees a running request's blocks (admitting the next) and a
// queued request's place and backlog.
func TestCancelFrees(t *testing.T) {
	m := clock.NewManual(t0)
	w := New(Config{BlockSize: 16, TotalKVBlocks: 100, MaxNumSeqs: 1}, m)
	a := start(w, Request{PromptTokens: 40, MaxTokens: 100})
	waitTimers(t, m, 1)
	b := start(w, Request{PromptTokens: 20, MaxTokens: 1})
	c := start(w, Request{PromptTokens: 30, MaxTokens: 1})
	eventually(t, func() bool { return queued(w, 0) == 2 }, "b and c queue")

	b.cancel()
	_, err := b.wait(t)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, uint64(70), w.Load(0).ActivePrefillTokens, "b's prompt left the backlog")

	m.Advance(time.Second) // a's prefill
	waitTimers(t, m, 1)
	a.cancel()
	res, err := a.wait(t)
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, res.FinishReason)
	waitTimers(t, m, 1) // c admitted and prefilling
	assert.Equal(t, Load{KVUsedBlocks: 2, ActiveDecodeBlocks: 2, ActivePrefillTokens: 30}, w.Load(0))
	drive(t, m, c)
	assert.Equal(t, Load{}, w.Load(0))
}

// An emit error ends the request like a cancel.
func TestEmitErrorFrees(t *testing.T) {
	m := clock.NewManual(t0)
	w := New(Config{}, m)
	stop := assert.AnError
	done := make(chan error, 1)
	go func() {
		_, err := w.Generate(context.Background(), Request{PromptTokens: 8, MaxTokens: 5}, func(string) error { return stop })
		done <- err
	}()
	for i := 0; i < 2; i++ {
		waitTimers(t, m, 1)
		m.Advance(1e9)
	}
	require.ErrorIs(t, <-done, stop)
	assert.Equal(t, Load{}, w.Load(0))
}

func TestRejectedRequests(t *testing.T) {
	w := New(Config{BlockSize: 16, TotalKVBlocks: 4, DPSize: 2}, clock.NewManual(t0))
	_, err := w.Generate(context.Background(), Request{DPRank: 2, MaxTokens: 1}, nil)
	assert.ErrorIs(t, err, ErrRankRange)
	_, err = w.Generate(context.Background(), Request{PromptTokens: 60, MaxTokens: 5}, nil)
	assert.ErrorIs(t, err, ErrTooLarge, "65 tokens need 5 blocks of 4")
	_, err = w.Generate(context.Background(), Request{PromptTokens: -1}, nil)
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, Load{}, w.Load(0))
}

// Ranks are independent schedulers.
func TestRanksAreIndependent(t *testing.T) {
	m := clock.NewManual(t0)
	w := New(Config{BlockSize: 16, TotalKVBlocks: 100, MaxNumSeqs: 1, DPSize: 2}, m)
	a := start(w, Request{DPRank: 0, PromptTokens: 16, MaxTokens: 1})
	b := start(w, Request{DPRank: 1, PromptTokens: 32, MaxTokens: 1})
	waitTimers(t, m, 2)
	assert.Equal(t, uint64(1), w.Load(0).KVUsedBlocks)
	assert.Equal(t, uint64(2), w.Load(1).KVUsedBlocks)
	drive(t, m, a, b)
}
