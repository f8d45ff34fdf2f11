// Package worker is the generation side of a live fake Dynamo worker. It
// runs requests with the Dynamo mocker's timing model, admits them the way a
// vLLM-style scheduler does (a sequence limit and a KV-block budget per
// data-parallel rank, first come first served), and reports the per-rank
// load that a publisher sends on the event plane.
//
// Registration and publishing are done elsewhere; this package only
// computes. All waiting goes through a clock.Clock so tests can step time
// by hand.
package worker

import (
	"errors"
	"sync"
	"time"

	"switchyard/router/clock"
)

// Worker roles, as in the model card's worker_type.
const (
	RolePrefill    = "prefill"
	RoleDecode     = "decode"
	RoleAggregated = "aggregated"
)

// Defaults for zero Config fields: the mocker's command-line defaults
// (dynamo-wire §9.1), so a zero Config behaves like `dynamo.mocker`.
const (
	DefaultBlockSize           = 64
	DefaultTotalKVBlocks       = 16384
	DefaultMaxNumBatchedTokens = 8192
	DefaultMaxNumSeqs          = 256
)

// Errors Generate returns besides the context's.
var (
	// ErrInjected5xx is the failure SetFailing injects; a frontend answers 500.
	ErrInjected5xx = errors.New("worker: injected failure")
	// ErrRankRange: the request names a dp rank the worker does not have.
	ErrRankRange = errors.New("worker: dp rank out of range")
	// ErrTooLarge: the request could never fit the rank's KV cache, so
	// queueing it would block the rank's queue for good.
	ErrTooLarge = errors.New("worker: request needs more KV blocks than the rank has")
	// ErrInvalid: a negative token count.
	ErrInvalid = errors.New("worker: negative token count")
)

// Config describes one worker. Zero capacity fields take the mocker's
// defaults; DPSize and SpeedupRatio default to 1.
type Config struct {
	Model string
	// Role is RolePrefill, RoleDecode or RoleAggregated (the default).
	Role string
	// BlockSize is kv_cache_block_size in tokens.
	BlockSize int
	// TotalKVBlocks is the KV cache size of each rank, in blocks.
	TotalKVBlocks int
	// MaxNumBatchedTokens bounds one prefill step: longer prompts are
	// prefilled in chunks of this many tokens (chunked prefill).
	MaxNumBatchedTokens int
	// MaxNumSeqs bounds the running requests of each rank.
	MaxNumSeqs int
	// DPSize is the number of data-parallel ranks, 0..DPSize-1.
	DPSize int
	// SpeedupRatio divides every modelled duration (the mocker's
	// --speedup-ratio); injected slowness is not divided.
	SpeedupRatio float64
}

func (c Config) withDefaults() Config {
	if c.Role == "" {
		c.Role = RoleAggregated
	}
	if c.BlockSize <= 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.TotalKVBlocks <= 0 {
		c.TotalKVBlocks = DefaultTotalKVBlocks
	}
	if c.MaxNumBatchedTokens <= 0 {
		c.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if c.MaxNumSeqs <= 0 {
		c.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if c.DPSize <= 0 {
		c.DPSize = 1
	}
	if c.SpeedupRatio <= 0 {
		c.SpeedupRatio = 1
	}
	return c
}

// Request is one generation request on one rank.
type Request struct {
	DPRank       uint32
	PromptTokens int
	MaxTokens    int
	// CachedTokens are prompt tokens whose KV is already on the rank, as
	// on a decode worker after the prefill worker's KV transfer: they are
	// not prefilled again. Zero means the whole prompt is new.
	CachedTokens int
	// PromptID identifies the prompt's content (a hash of its text), so a
	// generator that models token ids (fakefleet/engineworker) gives equal
	// prompts equal tokens. This worker does not use it.
	PromptID uint64
	// Tokens are the prompt's token ids when the frontend tokenized it
	// (then PromptTokens is their count); nil when it only estimated.
	Tokens []uint32
}

// Result is a finished (or interrupted) request's accounting.
type Result struct {
	PromptTokens, CompletionTokens int
	// FinishReason is "length" when MaxTokens were generated; empty when
	// the request was interrupted.
	FinishReason string
}

// Load is one rank's load as a Dynamo worker publishes it.
type Load struct {
	// KVUsedBlocks are the KV blocks held (what dynamo.vllm publishes).
	KVUsedBlocks uint64
	// ActiveDecodeBlocks are the blocks of the running requests (the
	// scheduler's view). Without a prefix cache that keeps freed blocks it
	// equals KVUsedBlocks.
	ActiveDecodeBlocks uint64
	// ActivePrefillTokens are prompt tokens queued or not yet prefilled.
	ActivePrefillTokens uint64
}

// Worker is one fake worker with Config.DPSize ranks. It is safe for
// concurrent use.
type Worker struct {
	cfg Config
	clk clock.Clock

	mu    sync.Mutex
	ranks []*rank
	// resume is non-nil while the worker is stalled and closed when it
	// resumes, so every paused request wakes at once.
	resume    chan struct{}
	slow      time.Duration
	failing   bool
	listeners []func(rank uint32)
}

// New makes a worker. clk drives all of its waits.
func New(cfg Config, clk clock.Clock) *Worker {
	cfg = cfg.withDefaults()
	w := &Worker{cfg: cfg, clk: clk, ranks: make([]*rank, cfg.DPSize)}
	for i := range w.ranks {
		w.ranks[i] = &rank{}
	}
	return w
}

// Config returns the worker's configuration with defaults filled in.
func (w *Worker) Config() Config { return w.cfg }

// Load reports a rank's load; an unknown rank reports zero.
func (w *Worker) Load(rank uint32) Load {
	w.mu.Lock()
	defer w.mu.Unlock()
	if int(rank) >= len(w.ranks) {
		return Load{}
	}
	return w.ranks[rank].load()
}

// OnChange registers f, called whenever a rank's Load changes, from the
// goroutine that changed it and with no lock held. Calls for one rank may
// overlap or arrive out of order, so f should read Load rather than assume
// what changed.
func (w *Worker) OnChange(f func(rank uint32)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.listeners = append(w.listeners, f)
}

// SetStalled freezes (true) or resumes (false) the worker. A stalled worker
// makes no progress: running requests stop before their next step, queued
// ones are not admitted, and OnChange is not called, as when an engine
// hangs. Cancelled requests still free their blocks. Resuming reports every
// rank once, so publishers catch up.
func (w *Worker) SetStalled(stalled bool) {
	w.mu.Lock()
	if stalled {
		if w.resume == nil {
			w.resume = make(chan struct{})
		}
		w.mu.Unlock()
		return
	}
	if w.resume == nil {
		w.mu.Unlock()
		return
	}
	close(w.resume)
	w.resume = nil
	for _, r := range w.ranks {
		r.admit(w.cfg)
	}
	fs := w.listeners
	w.mu.Unlock()
	for i := range w.ranks {
		for _, f := range fs {
			f(uint32(i))
		}
	}
}

// SetSlow adds extra to every decode step (per generated token), on top of
// the modelled step time and not divided by SpeedupRatio.
func (w *Worker) SetSlow(extra time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.slow = max(extra, 0)
}

// SetFailing makes Generate fail with ErrInjected5xx at once (true), or
// serve again (false). Requests already running are not affected.
func (w *Worker) SetFailing(failing bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failing = failing
}

// update applies f to a rank under the lock, then tells the listeners if
// the rank's load changed, after unlocking so they may call Load.
func (w *Worker) update(r uint32, f func(rk *rank)) {
	w.mu.Lock()
	rk := w.ranks[r]
	before := rk.load()
	f(rk)
	var fs []func(uint32)
	if w.resume == nil && rk.load() != before {
		fs = w.listeners
	}
	w.mu.Unlock()
	for _, f := range fs {
		f(r)
	}
}
