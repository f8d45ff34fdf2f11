package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/clock"
)

// recorder keeps every load OnChange reports.
type recorder struct {
	mu    sync.Mutex
	seen  map[uint32][]Load
	calls int
}

func record(w *Worker) *recorder {
	rec := &recorder{seen: map[uint32][]Load{}}
	w.OnChange(func(r uint32) {
		l := w.Load(r)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		rec.seen[r] = append(rec.seen[r], l)
		rec.calls++
	})
	return rec
}

func (rec *recorder) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.calls
}

func (rec *recorder) loads(r uint32) []Load {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]Load(nil), rec.seen[r]...)
}

// OnChange fires on every load change of the rank and only then: admission,
// prefill done, a new block, release. A token within a block changes
// nothing.
func TestOnChange(t *testing.T) {
	m := clock.NewManual(t0)
	w := New(Config{BlockSize: 16, TotalKVBlocks: 100, DPSize: 2}, m)
	rec := record(w)
	r := start(w, Request{DPRank: 1, PromptTokens: 16, MaxTokens: 2})
	drive(t, m, r)
	assert.Equal(t, []Load{
		{KVUsedBlocks: 1, ActiveDecodeBlocks: 1, ActivePrefillTokens: 16},
		{KVUsedBlocks: 1, ActiveDecodeBlocks: 1},
		{KVUsedBlocks: 2, ActiveDecodeBlocks: 2},
		{},
	}, rec.loads(1))
	assert.Empty(t, rec.loads(0))
}

// A stalled worker makes no progress and reports nothing, whatever the
// clock does; cancelling still frees; resuming reports every rank and lets
// requests finish.
func TestStalled(t *testing.T) {
	m := clock.NewManual(t0)
	w := New(Config{BlockSize: 16, TotalKVBlocks: 100, DPSize: 2}, m)
	a := start(w, Request{PromptTokens: 16, MaxTokens: 3})
	b := start(w, Request{PromptTokens: 16, MaxTokens: 3})
	waitTimers(t, m, 2)
	rec := record(w)
	w.SetStalled(true)
	before := w.Load(0)

	m.Advance(time.Hour)
	c := start(w, Request{DPRank: 1, PromptTokens: 8, MaxTokens: 1})
	eventually(t, func() bool { return queued(w, 1) == 1 }, "c queues: no admission while stalled")
	m.Advance(time.Hour)
	assert.Zero(t, m.Pending(), "nobody waits on the clock: requests are parked")
	noTokens(t, a)
	noTokens(t, b)
	assert.Equal(t, before, w.Load(0), "load stays")
	assert.False(t, a.isFinished())

	b.cancel()
	_, err := b.wait(t)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, uint64(1), w.Load(0).KVUsedBlocks, "b's block is freed")
	assert.Zero(t, rec.count(), "a stalled worker does not report")

	w.SetStalled(false)
	// Reported before SetStalled returns; resumed requests may add more.
	assert.NotEmpty(t, rec.loads(0), "resuming reports rank 0")
	assert.NotEmpty(t, rec.loads(1), "resuming reports rank 1")
	drive(t, m, a, c)
	assert.Equal(t, "length", a.res.FinishReason)
	assert.Equal(t, Load{}, w.Load(0))
	assert.Equal(t, Load{}, w.Load(1))
}

// SetSlow adds its delay, unscaled, to every decode step.
func TestSlow(t *testing.T) {
	m := clock.NewManual(t0)
	w := New(Config{BlockSize: 16, TotalKVBlocks: 100, SpeedupRatio: 10}, m)
	w.SetSlow(time.Second)
	r := start(w, Request{PromptTokens: 16, CachedTokens: 16, MaxTokens: 1})
	waitTimers(t, m, 1)
	step := scaled(decodeStepMillis(0.01), 10) + time.Second
	m.Advance(step - 1)
	noTokens(t, r)
	m.Advance(1)
	_, err := r.wait(t)
	require.NoError(t, err)
}

func TestFailing(t *testing.T) {
	m := clock.NewManual(t0)
	w := New(Config{}, m)
	rec := record(w)
	w.SetFailing(true)
	_, err := w.Generate(context.Background(), Request{PromptTokens: 10, MaxTokens: 1}, nil)
	require.ErrorIs(t, err, ErrInjected5xx)
	assert.Zero(t, rec.count())
	assert.Equal(t, Load{}, w.Load(0))

	w.SetFailing(false)
	drive(t, m, start(w, Request{PromptTokens: 10, MaxTokens: 1}))
}
