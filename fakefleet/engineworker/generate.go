package engineworker

import (
	"context"
	"math/rand/v2"

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
	if req.MaxTokens < 0 || (req.Tokens == nil && req.PromptTokens < 0) {
		return Result{}, ErrInvalid
	}
	toks := req.Tokens
	if toks == nil {
		toks = SyntheticPrompt(req.PromptTokens, req.Seed)
	}
	res := Result{PromptTokens: len(toks)}
	j, err := w.submit(req.DPRank, toks, req.MaxTokens)
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
		outs := j.outs
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
	}
}

// submit checks the worker's state and enqueues the request on its rank.
func (w *Worker) submit(r uint32, toks []uint32, maxTokens int) (*job, error) {
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		return nil, ErrClosed
	case w.failing:
		w.mu.Unlock()
		return nil, ErrInjected5xx
	case int(r) >= len(w.ranks):
		w.mu.Unlock()
		return nil, ErrRankRange
	}
	rk := w.ranks[r]
	before := w.loadLocked(r)
	w.nextID++
	j := &job{ready: make(chan struct{}, 1)}
	rk.jobs[w.nextID] = j
	now := w.engineNowLocked()
	rk.eng.Submit(engine.Request{ID: w.nextID, Tokens: toks, MaxTokens: maxTokens, Arrival: now}, now)
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
