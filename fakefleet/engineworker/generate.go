package engineworker

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"switchyard/fakefleet/engine"
)

// Request is one generation request on one rank.
type Request struct {
	DPRank uint32
	// Tokens is the prompt. When nil, PromptTokens tokens are synthesized
	// from Seed (see SyntheticPrompt); when set, PromptTokens is ignored.
	Tokens       []uint32
	PromptTokens int
	Seed         uint64
	// MaxTokens is how many tokens are generated. The engine always
	// computes at least one, so 0 runs a prefill-only request (the one
	// token is computed but not emitted).
	MaxTokens int
	// CachedTokens is how many prompt tokens' KV a prefill worker computed
	// for this request (the decode hop of a disaggregated request). Their
	// blocks are transferred before the request reaches the engine, which
	// takes Config.KVTransferBandwidth time; at most the prompt's length is
	// charged. The engine then imports them (engine.Request.Imported): it
	// reserves and caches their blocks and computes only the last token.
	CachedTokens int
}

// vocabSize bounds synthesized token ids, like a small model's vocabulary.
const vocabSize = 32000

// SyntheticPrompt returns n token ids drawn from a stream seeded only by
// seed, so prompts with one seed share their prefix whatever their
// lengths, and the prefix cache sees the reuse a real workload has.
func SyntheticPrompt(n int, seed uint64) []uint32 {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]uint32, n)
	for i := range out {
		out[i] = rng.Uint32N(vocabSize)
	}
	return out
}

// Generate submits req to its rank's engine and emits one word per token
// the engine generates. It returns when the engine finishes the request,
// ctx ends, emit fails, or the worker closes.
//
// The engine has no cancellation, so a request abandoned early (ctx or
// emit) stays in the engine: it keeps its blocks and counts in Load until
// it finishes, and its remaining outputs are dropped. Preemption is
// invisible to the caller beyond delay: the engine recomputes and resumes.
func (w *Worker) Generate(ctx context.Context, req Request, emit func(text string) error) (Result, error) {
	if emit == nil {
		emit = func(string) error { return nil }
	}
	if req.MaxTokens < 0 || req.CachedTokens < 0 || (req.Tokens == nil && req.PromptTokens < 0) {
		return Result{}, ErrInvalid
	}
	toks := req.Tokens
	if toks == nil {
		toks = SyntheticPrompt(req.PromptTokens, req.Seed)
	}
	res := Result{PromptTokens: len(toks)}
	if err := w.transfer(ctx, req.DPRank, min(req.CachedTokens, len(toks))); err != nil {
		return res, err
	}
	j, err := w.submit(req.DPRank, toks, req.MaxTokens, min(req.CachedTokens, len(toks)))
	if err != nil {
		return res, err
	}
	for {
		select {
		case <-j.ready:
		case <-ctx.Done():
			return res, ctx.Err()
		case <-w.done:
			return res, ErrClosed
		}
		w.mu.Lock()
		outs, jerr := j.outs, j.err
		j.outs = nil
		w.mu.Unlock()
		for _, o := range outs {
			if o.Rejected {
				return res, ErrTooLarge
			}
			for range o.NewTokens {
				if res.CompletionTokens >= req.MaxTokens {
					break
				}
				if err := emit(tokenText(len(toks), res.CompletionTokens)); err != nil {
					return res, err
				}
				res.CompletionTokens++
			}
			if o.Finished {
				res.FinishReason = "length"
				return res, nil
			}
		}
		if jerr != nil {
			return res, jerr // after the tokens produced before it
		}
	}
}

// TransferTime is how long moving the KV of cachedTokens prompt tokens
// takes: whole blocks, since engines ship blocks, at the configured
// bandwidth, divided by SpeedupRatio like every other simulated cost.
func (w *Worker) TransferTime(cachedTokens int) time.Duration {
	if cachedTokens <= 0 || w.cfg.KVTransferBandwidth <= 0 {
		return 0
	}
	blocks := (cachedTokens + w.cfg.BlockSize - 1) / w.cfg.BlockSize
	bytes := float64(blocks) * float64(w.cfg.KVBytesPerBlock)
	// In nanoseconds first so whole-number cases stay exact.
	return time.Duration(math.Round(bytes * 1e9 / (w.cfg.KVTransferBandwidth * w.cfg.SpeedupRatio)))
}

// transfer waits out the KV transfer of cachedTokens on the clock. It
// refuses first if the request would be refused anyway, so an injected
// failure or a bad rank fails at once rather than after the transfer.
func (w *Worker) transfer(ctx context.Context, r uint32, cachedTokens int) error {
	d := w.TransferTime(cachedTokens)
	if d <= 0 {
		return nil
	}
	w.mu.Lock()
	err := w.admitLocked(r)
	w.mu.Unlock()
	if err != nil {
		return err
	}
	t := w.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.done:
		return ErrClosed
	}
}

// admitLocked is why a request for rank r would be refused now, if at all.
func (w *Worker) admitLocked(r uint32) error {
	switch {
	case w.closed:
		return ErrClosed
	case w.failing:
		return ErrInjected5xx
	case int(r) >= len(w.ranks):
		return ErrRankRange
	}
	return nil
}

// submit checks the worker's state and enqueues the request on its rank.
func (w *Worker) submit(r uint32, toks []uint32, maxTokens, imported int) (*job, error) {
	w.mu.Lock()
	if err := w.admitLocked(r); err != nil {
		w.mu.Unlock()
		return nil, err
	}
	rk := w.ranks[r]
	before := w.loadLocked(r)
	w.nextID++
	j := &job{ready: make(chan struct{}, 1)}
	rk.jobs[w.nextID] = j
	now := w.engineNowLocked()
	rk.eng.Submit(engine.Request{ID: w.nextID, Tokens: toks, MaxTokens: maxTokens, Imported: imported, Arrival: now}, now)
	var fs []func(uint32)
	if w.resume == nil && w.loadLocked(r) != before {
		fs = w.listeners
	}
	w.mu.Unlock()
	poke(rk.wake)
	for _, f := range fs {
		f(r)
	}
	return j, nil
}

// words are this worker's fake vocabulary, disjoint from fakefleet/worker's
// so a test can tell which worker produced a stream.
var words = [...]string{
	"amber", "birch", "cedar", "dune", "ember", "fjord", "grove", "heath",
	"inlet", "jade", "knoll", "larch", "marsh", "nook", "opal", "peak",
}

// tokenText is token i of a request with promptTokens prompt tokens:
// deterministic, with a leading space after the first so pieces join.
func tokenText(promptTokens, i int) string {
	w := words[(promptTokens*3+i*5)%len(words)]
	if i == 0 {
		return w
	}
	return " " + w
}
