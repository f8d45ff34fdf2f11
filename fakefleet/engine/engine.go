// Package engine is a pure model of one vLLM-style data-parallel rank:
// continuous batching with chunked prefill, a prefix-cached KV block pool
// with LRU eviction, and LIFO preemption. It has no goroutines and never
// reads a clock: the host submits requests and calls Advance at the times
// NextEvent names, so the live fake fleet and the simulator drive the very
// same state machine (architecture.md, "One core, two clocks").
package engine

import "time"

// Config sizes one rank. Zero values are replaced by the mocker's defaults
// (dynamo-wire.md §9.1) so a partial config still yields a sane engine.
type Config struct {
	BlockSize           int
	TotalKVBlocks       int
	MaxNumBatchedTokens int
	MaxNumSeqs          int
	SpeedupRatio        float64
	Timing              Timing // nil = Mocker

	// MaxModelLen caps prompt + generated tokens of one request; a longer
	// request is rejected on submit, as vLLM refuses it. 0 = no cap.
	MaxModelLen int
	// DisablePrefixCaching makes every prompt compute from scratch and
	// keeps its blocks private (no Stored events), as vLLM with
	// enable_prefix_caching=false.
	DisablePrefixCaching bool
	// DisableChunkedPrefill admits a prompt only when all of it fits in
	// the step's token budget (vLLM with enable_chunked_prefill=false);
	// requests longer than MaxNumBatchedTokens are then rejected, as vLLM
	// requires max_model_len <= max_num_batched_tokens in that mode.
	DisableChunkedPrefill bool
}

// Request is one generation. Tokens is the prompt; MaxTokens (at least 1)
// is exactly how many tokens it will generate.
type Request struct {
	ID        uint64
	Tokens    []uint32
	MaxTokens int
	Arrival   time.Time
	// Imported prompt tokens arrive with their KV already computed (the
	// decode hop of a disaggregated request, after the prefill worker's
	// transfer): the first admission reserves their blocks and registers
	// them in the prefix cache without computing them. At least one token
	// is always computed, so the first output still takes a step.
	Imported int
	// Blocks, when its BlockSize is the engine's, are the prompt's block
	// hashes computed by the host, which then may leave Tokens nil and
	// give the prompt's length in Blocks.Len: a simulator hashes each
	// prompt once for every engine and statistic that needs it.
	Blocks *PromptBlocks
}

// PromptBlocks are a prompt's length and the hashes of its complete
// blocks: Local are kv.BlockHashes under the base seed, Chained their
// kv.SequenceHashes. The engine only reads them.
type PromptBlocks struct {
	BlockSize      int
	Len            int
	Local, Chained []uint64
}

// promptLen is the prompt's length in tokens.
func (r *Request) promptLen() int {
	if r.Tokens == nil && r.Blocks != nil {
		return r.Blocks.Len
	}
	return len(r.Tokens)
}

// Output reports what one request did in a step.
type Output struct {
	RequestID  uint64
	NewTokens  int
	FirstToken bool
	// CachedTokens, on the FirstToken output, is how many prompt tokens
	// the prefix cache served (the last admission's hits before the first
	// token, if preemption made it recompute).
	CachedTokens int
	Finished     bool
	// Preempted: its KV was dropped; it will recompute from the waiting
	// queue and then continue generating where it left off.
	Preempted bool
	// Rejected: it could never run and was dropped; Reason says why.
	Rejected bool
	Reason   RejectReason
}

// RejectReason says why a request was rejected on submit.
type RejectReason uint8

const (
	NotRejected RejectReason = iota
	// RejectKVCache: prompt + output need more blocks than the rank has.
	RejectKVCache
	// RejectMaxModelLen: prompt + output exceed Config.MaxModelLen.
	RejectMaxModelLen
	// RejectBatchBudget: without chunked prefill, the request is longer
	// than one step's token budget.
	RejectBatchBudget
)

func (r RejectReason) String() string {
	switch r {
	case RejectKVCache:
		return "prompt larger than the worker's KV cache"
	case RejectMaxModelLen:
		return "prompt and output longer than the model's maximum length"
	case RejectBatchBudget:
		return "prompt and output longer than a step's token budget (chunked prefill off)"
	}
	return "not rejected"
}

// Stats are cumulative counters, kept so hosts and tests can see cache
// effectiveness without replaying outputs.
type Stats struct {
	PrefillTokens uint64 // prompt (and recompute) tokens actually computed
	CachedTokens  uint64 // prompt tokens skipped thanks to prefix hits
	Preemptions   uint64
	Steps         uint64
}

// maxKVBlocks bounds Config.TotalKVBlocks: the pool addresses its cached
// blocks with int32 slots.
const maxKVBlocks = 1<<31 - 2

// Engine is one rank. It is not safe for concurrent use; its host
// serialises calls.
type Engine struct {
	cfg    Config
	timing Timing
	pool   *pool

	waiting []*seq // FIFO; preempted requests go back to the front
	running []*seq // admission order, so LIFO preemption takes the tail

	busy    bool      // a step is in flight and ends at nextAt
	pending bool      // idle, but something must be planned at nextAt
	nextAt  time.Time // end of the step in flight, or the planning time
	batch   []scheduled
	step    Step     // the planned step's shape; its slices are reused
	queued  []Output // outputs produced outside a step (rejections)

	events  []KVEvent
	eventID uint64
	stats   Stats
}

// New returns an idle engine with an empty cache.
func New(cfg Config) *Engine {
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 64
	}
	if cfg.TotalKVBlocks <= 0 {
		cfg.TotalKVBlocks = 16384
	}
	cfg.TotalKVBlocks = min(cfg.TotalKVBlocks, maxKVBlocks)
	if cfg.MaxNumBatchedTokens <= 0 {
		cfg.MaxNumBatchedTokens = 8192
	}
	if cfg.MaxNumSeqs <= 0 {
		cfg.MaxNumSeqs = 256
	}
	if cfg.SpeedupRatio <= 0 {
		cfg.SpeedupRatio = 1
	}
	e := &Engine{cfg: cfg, timing: cfg.Timing}
	if e.timing == nil {
		e.timing = Mocker{}
	}
	e.pool = newPool(cfg.TotalKVBlocks, e.emit)
	return e
}

// Submit enqueues r at now. If the engine is idle the next step is planned
// at now, so requests submitted at the same instant share a batch.
func (e *Engine) Submit(r Request, now time.Time) {
	s := newSeq(r, e.cfg.BlockSize)
	if why := e.refuse(s.prompt + s.maxTokens); why != NotRejected {
		e.queued = append(e.queued, Output{RequestID: r.ID, Finished: true, Rejected: true, Reason: why})
	} else {
		e.waiting = append(e.waiting, s)
	}
	if !e.busy && !e.pending {
		e.pending, e.nextAt = true, now
	}
}

// refuse says why a request of total prompt + output tokens can never run,
// or NotRejected.
func (e *Engine) refuse(total int) RejectReason {
	switch {
	case e.cfg.MaxModelLen > 0 && total > e.cfg.MaxModelLen:
		return RejectMaxModelLen
	case e.cfg.DisableChunkedPrefill && total > e.cfg.MaxNumBatchedTokens:
		return RejectBatchBudget
	case e.blocksFor(total) > e.cfg.TotalKVBlocks:
		return RejectKVCache
	}
	return NotRejected
}

// NextEvent is when Advance next has work: the end of the step in flight,
// or the planning time of a step after an idle period.
func (e *Engine) NextEvent() (time.Time, bool) {
	return e.nextAt, e.busy || e.pending
}

// Advance completes every step that ends at or before now, planning each
// following step at the previous one's end (not at now), so outputs do not
// depend on how late the host calls.
func (e *Engine) Advance(now time.Time) []Output {
	out := e.AdvanceAppend(nil, now)
	if len(out) == 0 {
		return nil
	}
	return out
}

// AdvanceAppend is Advance appending the outputs to dst, so a host that
// steps often can reuse one buffer instead of allocating every step.
func (e *Engine) AdvanceAppend(dst []Output, now time.Time) []Output {
	out := append(dst, e.queued...)
	e.queued = e.queued[:0]
	for (e.busy || e.pending) && !e.nextAt.After(now) {
		if e.busy {
			out = e.complete(out)
		}
		out = e.plan(out)
	}
	return out
}

// Load reports the quantities Dynamo's ActiveLoad carries: blocks pinned by
// requests (cached-but-free blocks count as free, as in vLLM), blocks held
// by requests past prefill, and prompt tokens still to compute.
func (e *Engine) Load() (kvUsedBlocks, activeDecodeBlocks, activePrefillTokens uint64) {
	kvUsedBlocks = uint64(e.pool.referenced())
	for _, s := range e.running {
		if s.decoding() {
			activeDecodeBlocks += uint64(s.held())
		} else {
			activePrefillTokens += uint64(s.target() - s.computed)
		}
	}
	for _, s := range e.waiting {
		activePrefillTokens += uint64(s.target() - s.computed)
	}
	return
}

// Stats returns the cumulative counters.
func (e *Engine) Stats() Stats { return e.stats }

// DrainKVEvents returns the KV events since the last drain, oldest first.
func (e *Engine) DrainKVEvents() []KVEvent {
	ev := e.events
	e.events = nil
	return ev
}

// Reset drops every request and cached block, as an engine restart would,
// and reports it with a single Cleared event. Dropped requests produce no
// outputs; the host owns telling their clients.
func (e *Engine) Reset() {
	e.waiting, e.running, e.batch, e.queued = nil, nil, nil, nil
	e.busy, e.pending = false, false
	e.pool = newPool(e.cfg.TotalKVBlocks, e.emit)
	e.emit(KVEvent{Kind: Cleared})
}

func (e *Engine) emit(ev KVEvent) {
	e.eventID++
	ev.EventID = e.eventID
	e.events = append(e.events, ev)
}

func (e *Engine) blocksFor(tokens int) int {
	return (tokens + e.cfg.BlockSize - 1) / e.cfg.BlockSize
}
