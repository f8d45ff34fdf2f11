// Package engineworker is a live fake worker whose generation runs on the
// pure engine model (fakefleet/engine) instead of fakefleet/worker's own
// admission arithmetic. Each data-parallel rank is one engine.Engine
// stepped by one driver goroutine at the times the engine names, on a
// clock.Clock, so the KV cache it reports (prefix hits, LRU eviction,
// preemption) is the engine's, and its KV events can be published exactly
// as the engine emits them.
//
// The frontend emulation still generates on *worker.Worker; this worker is
// reached through its own Generate (tests and the fleet's Spec.Engine
// mode), so it does not yet serve HTTP traffic.
package engineworker

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"switchyard/fakefleet/engine"
	"switchyard/fakefleet/worker"
	"switchyard/router/clock"
)

// Result and Load are fakefleet/worker's, so code that reports either
// worker's accounting needs no conversion.
type (
	Result = worker.Result
	Load   = worker.Load
)

// Errors Generate returns besides the context's. The first four are
// fakefleet/worker's, so a frontend maps both workers' failures alike.
var (
	ErrInjected5xx = worker.ErrInjected5xx
	ErrRankRange   = worker.ErrRankRange
	ErrTooLarge    = worker.ErrTooLarge
	ErrInvalid     = worker.ErrInvalid
	// ErrClosed: the worker was closed while the request was in flight.
	ErrClosed = errors.New("engineworker: worker closed")
	// ErrReset: Reset dropped the request's engine state mid-flight.
	ErrReset = errors.New("engineworker: engine reset")
)

// DefaultKVBytesPerBlock is the KV size of one 64-token block of a
// Llama-3.2-1B-shaped model (16 layers × K and V × 8 KV heads × head dim
// 64 × 2 bytes = 32 KiB per token): small enough that transfers stay short
// at realistic bandwidths, like the small models the fleet pretends to be.
const DefaultKVBytesPerBlock = 2 << 20

// Config describes one worker. Zero fields take fakefleet/worker's
// defaults (the mocker's), DPSize and SpeedupRatio default to 1.
type Config struct {
	Model               string
	Role                string
	BlockSize           int
	TotalKVBlocks       int
	MaxNumBatchedTokens int
	MaxNumSeqs          int
	DPSize              int
	SpeedupRatio        float64
	// Timing prices engine steps; nil is the mocker's polynomials.
	Timing engine.Timing
	// MaxModelLen, DisablePrefixCaching and DisableChunkedPrefill are
	// vLLM's scheduler settings as engine.Config has them (a profile's,
	// perf.Profile.EngineConfig); zero values are the mocker's engine: no
	// length cap, prefix caching and chunked prefill on.
	MaxModelLen           int
	DisablePrefixCaching  bool
	DisableChunkedPrefill bool
	// KVTransferBandwidth, in bytes per second, prices moving a prefill
	// worker's KV to this worker (Request.CachedTokens), as the mocker's
	// --kv-transfer-bandwidth does; 0 (or less) makes it instantaneous.
	KVTransferBandwidth float64
	// KVBytesPerBlock is a model parameter: the KV bytes of one block of
	// BlockSize tokens (layers × 2 × KV heads × head dim × dtype bytes ×
	// BlockSize). 0 means DefaultKVBytesPerBlock, which assumes 64-token
	// blocks, so set it when changing BlockSize or the model's shape.
	KVBytesPerBlock int
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Role == "" {
		c.Role = worker.RoleAggregated
	}
	def(&c.BlockSize, worker.DefaultBlockSize)
	def(&c.TotalKVBlocks, worker.DefaultTotalKVBlocks)
	def(&c.MaxNumBatchedTokens, worker.DefaultMaxNumBatchedTokens)
	def(&c.MaxNumSeqs, worker.DefaultMaxNumSeqs)
	def(&c.DPSize, 1)
	def(&c.KVBytesPerBlock, DefaultKVBytesPerBlock)
	c.KVTransferBandwidth = max(c.KVTransferBandwidth, 0)
	if c.SpeedupRatio <= 0 {
		c.SpeedupRatio = 1
	}
	if c.Timing == nil {
		c.Timing = engine.Mocker{}
	}
	return c
}

// Worker is one engine-backed fake worker with Config.DPSize ranks. It is
// safe for concurrent use; Close stops its driver goroutines.
type Worker struct {
	cfg  Config
	clk  clock.Clock
	slow atomic.Int64 // extra per decode step, in wall (unscaled) ns
	// slowFactor multiplies the decode part of each step (math.Float64bits;
	// 0 is unset, which is 1).
	slowFactor atomic.Uint64

	mu    sync.Mutex
	ranks []*rank
	// resume is non-nil while stalled and closed on resume.
	resume  chan struct{}
	failing bool
	// Engine time is clock time minus every stall so far: a stalled
	// engine's timeline freezes instead of bursting to catch up on resume.
	offset    time.Duration
	stalledAt time.Time
	nextID    uint64
	listeners []func(rank uint32)
	kvSinks   []func(rank uint32, evs []engine.KVEvent)
	closed    bool
	done      chan struct{}
	wg        sync.WaitGroup
}

// rank is one engine and the requests waiting on its outputs; all fields
// are guarded by Worker.mu.
type rank struct {
	eng  *engine.Engine
	jobs map[uint64]*job
	wake chan struct{} // cap 1: a submit may have moved the next event
	// evs are KV events drained outside a step (by Reset), waiting for the
	// driver to deliver them, so every sink call for a rank comes from its
	// driver in EventID order.
	evs []engine.KVEvent
}

// job collects one request's outputs for its Generate call. Outputs are
// appended by the driver and taken by Generate, so the driver never blocks
// on a slow emitter.
type job struct {
	outs  []engine.Output
	err   error         // set when the job ends without finishing
	ready chan struct{} // cap 1
}

// New starts a worker whose drivers wait on clk.
func New(cfg Config, clk clock.Clock) *Worker {
	cfg = cfg.withDefaults()
	w := &Worker{cfg: cfg, clk: clk, ranks: make([]*rank, cfg.DPSize), done: make(chan struct{})}
	ecfg := engine.Config{BlockSize: cfg.BlockSize, TotalKVBlocks: cfg.TotalKVBlocks,
		MaxNumBatchedTokens: cfg.MaxNumBatchedTokens, MaxNumSeqs: cfg.MaxNumSeqs,
		SpeedupRatio: cfg.SpeedupRatio, Timing: slowTiming{cfg.Timing, w}, MaxModelLen: cfg.MaxModelLen,
		DisablePrefixCaching: cfg.DisablePrefixCaching, DisableChunkedPrefill: cfg.DisableChunkedPrefill}
	for i := range w.ranks {
		w.ranks[i] = &rank{eng: engine.New(ecfg), jobs: map[uint64]*job{}, wake: make(chan struct{}, 1)}
	}
	w.wg.Add(len(w.ranks))
	for i := range w.ranks {
		go w.drive(uint32(i))
	}
	return w
}

// Config returns the configuration with defaults filled in.
func (w *Worker) Config() Config { return w.cfg }

// Load reports a rank's engine load; an unknown rank reports zero. Blocks
// kept only by the prefix cache count as free, as in vLLM.
func (w *Worker) Load(r uint32) Load {
	w.mu.Lock()
	defer w.mu.Unlock()
	if int(r) >= len(w.ranks) {
		return Load{}
	}
	return w.loadLocked(r)
}

func (w *Worker) loadLocked(r uint32) Load {
	used, dec, pre := w.ranks[r].eng.Load()
	return Load{KVUsedBlocks: used, ActiveDecodeBlocks: dec, ActivePrefillTokens: pre}
}

// OnChange registers f, called after a submit or an engine step changed a
// rank's Load, with no lock held. As with fakefleet/worker, calls may
// overlap, so f should read Load rather than assume what changed.
func (w *Worker) OnChange(f func(rank uint32)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.listeners = append(w.listeners, f)
}

// OnKVEvents registers f, called after every engine step that produced KV
// events with that step's events, oldest first, and after a Reset with its
// Cleared event. Each rank's calls come from
// its one driver goroutine, in order, so f may publish them as they come.
func (w *Worker) OnKVEvents(f func(rank uint32, evs []engine.KVEvent)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kvSinks = append(w.kvSinks, f)
}

// SetStalled freezes (true) or resumes (false) every rank's driver: no
// step completes and OnChange is not called while stalled, as when an
// engine hangs. Engine time stands still meanwhile, so resuming continues
// the step in flight rather than finishing every overdue step at once.
// Unlike fakefleet/worker, a request cancelled while stalled keeps its
// blocks until it finishes after the resume (see Generate).
func (w *Worker) SetStalled(stalled bool) {
	w.mu.Lock()
	if stalled {
		if w.resume == nil {
			w.resume, w.stalledAt = make(chan struct{}), w.clk.Now()
		}
		w.mu.Unlock()
		return
	}
	if w.resume == nil {
		w.mu.Unlock()
		return
	}
	w.offset += w.clk.Now().Sub(w.stalledAt)
	close(w.resume)
	w.resume = nil
	fs := w.listeners
	w.mu.Unlock()
	// Loads moved while stalled (submits) without telling anyone.
	for i := range w.ranks {
		for _, f := range fs {
			f(uint32(i))
		}
	}
}

// SetSlow adds extra to every decode step, not divided by SpeedupRatio.
// It applies from the next step planned.
func (w *Worker) SetSlow(extra time.Duration) { w.slow.Store(int64(max(extra, 0))) }

// SetSlowFactor makes the decode part of every step take factor times
// longer (1 restores it), as the simulator's slow fault does: the part a
// step would cost without its prefill chunks is scaled, the prefill part
// is not. Factors that are not finite and positive count as 1. It applies
// from the next step planned.
func (w *Worker) SetSlowFactor(factor float64) {
	if !(factor > 0) || math.IsInf(factor, 0) {
		factor = 1
	}
	w.slowFactor.Store(math.Float64bits(factor))
}

// SetFailing makes Generate fail with ErrInjected5xx at once (true), or
// serve again (false). Requests already submitted are not affected.
func (w *Worker) SetFailing(failing bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failing = failing
}

// Reset restarts every rank's engine, as if each process had restarted:
// requests in flight on it fail with ErrReset and every cached block is
// dropped, so Load is zero when Reset returns. Each rank's resulting
// Cleared event reaches the OnKVEvents sinks through its driver, after the
// events of earlier steps, so a subscriber never sees a stale Stored after
// the Cleared. Requests still waiting for their KV transfer are submitted
// to the fresh engine afterwards. Reset on a closed worker does nothing.
func (w *Worker) Reset() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	for _, rk := range w.ranks {
		rk.eng.Reset()
		rk.evs = append(rk.evs, rk.eng.DrainKVEvents()...)
		for id, j := range rk.jobs {
			j.err = ErrReset
			poke(j.ready)
			delete(rk.jobs, id)
		}
		poke(rk.wake)
	}
	var fs []func(uint32)
	if w.resume == nil {
		fs = w.listeners // as with submits, a stalled worker stays silent
	}
	w.mu.Unlock()
	for i := range w.ranks {
		for _, f := range fs {
			f(uint32(i))
		}
	}
}

// Close stops the drivers and fails requests in flight with ErrClosed.
func (w *Worker) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	close(w.done)
	w.mu.Unlock()
	w.wg.Wait()
}

// engineNowLocked is the engine timeline's present.
func (w *Worker) engineNowLocked() time.Time {
	if w.resume != nil {
		return w.stalledAt.Add(-w.offset)
	}
	return w.clk.Now().Add(-w.offset)
}

// slowTiming scales the decode part of each step by SetSlowFactor's factor
// and adds SetSlow's delay to decode steps. The delay is multiplied by the
// speedup because the engine divides the whole step by it, and injected
// slowness is meant in wall time; the factor is a ratio, so it is not.
type slowTiming struct {
	base engine.Timing
	w    *Worker
}

func (t slowTiming) StepTime(s engine.Step) time.Duration {
	d := t.base.StepTime(s)
	if bits := t.w.slowFactor.Load(); bits != 0 && len(s.Decode) > 0 {
		if f := math.Float64frombits(bits); f != 1 {
			decodeOnly := s
			decodeOnly.Prefill, decodeOnly.PrefillTokens = nil, 0
			dec := t.base.StepTime(decodeOnly)
			d += time.Duration(float64(dec) * (f - 1))
		}
	}
	if len(s.Decode) > 0 {
		d += time.Duration(float64(t.w.slow.Load()) * t.w.cfg.SpeedupRatio)
	}
	return d
}

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
