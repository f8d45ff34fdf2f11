package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/clock"
)

func TestPolynomials(t *testing.T) {
	assert.InDelta(t, 32.1062, prefillMillis(1000), 1e-3)
	assert.InDelta(t, 16.5166, prefillMillis(1), 1e-3)
	assert.Zero(t, prefillMillis(0), "nothing new, nothing to prefill")
	assert.InDelta(t, 5.74, decodeStepMillis(0), 1e-9)
	assert.InDelta(t, 34.01, decodeStepMillis(1), 1e-9)
	assert.Equal(t, 1.0, decodeStepMillis(3), "floored at 1 ms")
	assert.Equal(t, 16*time.Millisecond, scaled(32, 2))
}

// A prefill of N tokens takes the polynomial's time over the speedup, then
// each decode step takes the step time at the rank's KV fraction.
func TestPrefillThenDecodeTiming(t *testing.T) {
	m := clock.NewManual(t0)
	w := New(Config{BlockSize: 16, TotalKVBlocks: 100, SpeedupRatio: 2}, m)
	r := start(w, Request{PromptTokens: 1000, MaxTokens: 2})
	waitTimers(t, m, 1)
	assert.Equal(t, Load{KVUsedBlocks: 63, ActiveDecodeBlocks: 63, ActivePrefillTokens: 1000}, w.Load(0))

	prefill := scaled(prefillMillis(1000), 2)
	m.Advance(prefill - 1)
	assert.Equal(t, 1, m.Pending(), "prefill still running")
	assert.Equal(t, uint64(1000), w.Load(0).ActivePrefillTokens)
	m.Advance(1)
	waitTimers(t, m, 1)
	assert.Zero(t, w.Load(0).ActivePrefillTokens, "prefill done")

	step := scaled(decodeStepMillis(0.63), 2)
	m.Advance(step - 1)
	noTokens(t, r)
	m.Advance(1)
	assert.Equal(t, "india", <-r.tokens) // words[1000%16]
	waitTimers(t, m, 1)
	// The first token started block 64 (1001 tokens), so the step slows.
	m.Advance(scaled(decodeStepMillis(0.64), 2))
	res, err := r.wait(t)
	require.NoError(t, err)
	assert.Equal(t, Result{PromptTokens: 1000, CompletionTokens: 2, FinishReason: "length"}, res)
	assert.Equal(t, Load{}, w.Load(0))
}

// Prompts longer than max_num_batched_tokens are prefilled in chunks, each
// a batch of the polynomial.
func TestChunkedPrefill(t *testing.T) {
	m := clock.NewManual(t0)
	w := New(Config{BlockSize: 16, TotalKVBlocks: 100, MaxNumBatchedTokens: 512}, m)
	r := start(w, Request{PromptTokens: 600, MaxTokens: 1})
	waitTimers(t, m, 1)
	m.Advance(scaled(prefillMillis(512), 1))
	waitTimers(t, m, 1)
	assert.Equal(t, uint64(88), w.Load(0).ActivePrefillTokens)
	m.Advance(scaled(prefillMillis(88), 1))
	waitTimers(t, m, 1)
	assert.Zero(t, w.Load(0).ActivePrefillTokens)
	drive(t, m, r)
}

// Cached tokens (KV transferred from a prefill worker) are not prefilled:
// with the whole prompt cached the first wait is already a decode step.
func TestCachedPromptSkipsPrefill(t *testing.T) {
	m := clock.NewManual(t0)
	w := New(Config{BlockSize: 16, TotalKVBlocks: 100}, m)
	r := start(w, Request{PromptTokens: 160, CachedTokens: 160, MaxTokens: 1})
	waitTimers(t, m, 1)
	assert.Equal(t, Load{KVUsedBlocks: 10, ActiveDecodeBlocks: 10}, w.Load(0))
	m.Advance(scaled(decodeStepMillis(0.1), 1))
	_, err := r.wait(t)
	require.NoError(t, err)
}

func TestTextIsDeterministic(t *testing.T) {
	collect := func() string {
		m := clock.NewManual(t0)
		w := New(Config{}, m)
		r := start(w, Request{PromptTokens: 5, MaxTokens: 4})
		drive(t, m, r)
		close(r.tokens)
		var b strings.Builder
		for s := range r.tokens {
			b.WriteString(s)
		}
		return b.String()
	}
	first := collect()
	assert.Equal(t, "foxtrot mike delta kilo", first)
	assert.Equal(t, first, collect())
}

// Block growth: a token that starts a new block takes one more block.
func TestBlocksGrowWithGeneratedTokens(t *testing.T) {
	m := clock.NewManual(t0)
	w := New(Config{BlockSize: 16, TotalKVBlocks: 100}, m)
	r := start(w, Request{PromptTokens: 16, MaxTokens: 17})
	waitTimers(t, m, 1)
	assert.Equal(t, uint64(1), w.Load(0).KVUsedBlocks)
	m.Advance(time.Second) // prefill
	waitTimers(t, m, 1)
	m.Advance(time.Second) // token 1: 17 tokens
	waitTimers(t, m, 1)
	assert.Equal(t, uint64(2), w.Load(0).KVUsedBlocks)
	for range 15 {
		m.Advance(time.Second)
		waitTimers(t, m, 1)
	}
	assert.Equal(t, uint64(2), w.Load(0).KVUsedBlocks, "32 tokens fill two blocks")
	m.Advance(time.Second) // token 17: 33 tokens
	_, err := r.wait(t)
	require.NoError(t, err)
	assert.Equal(t, Load{}, w.Load(0))
}
