package worker

import (
	"context"
	"time"

	"switchyard/router/clock"
)

// Generate runs req on its rank: it waits for admission, prefills the
// prompt's new tokens in chunks of MaxNumBatchedTokens, then runs
// MaxTokens decode steps, passing each step's token text to emit. It
// returns when the last token is emitted, ctx ends, or emit fails; in
// every case the request's blocks and queue place are given back.
func (w *Worker) Generate(ctx context.Context, req Request, emit func(text string) error) (Result, error) {
	res := Result{PromptTokens: req.PromptTokens}
	if emit == nil {
		emit = func(string) error { return nil }
	}
	j, err := w.start(req)
	if err != nil {
		return res, err
	}
	defer w.finish(j)

	select {
	case <-j.admitted:
	case <-ctx.Done():
		return res, ctx.Err()
	}
	if err := w.prefill(ctx, j); err != nil {
		return res, err
	}
	for i := range req.MaxTokens {
		if err := w.pause(ctx, w.stepDuration(j.rank)); err != nil {
			return res, err
		}
		w.update(j.rank, func(rk *rank) {
			// The new token's KV may start a block.
			if n := blocksFor(req.PromptTokens+i+1, w.cfg.BlockSize); n > j.held {
				rk.held += uint64(n - j.held)
				j.held = n
			}
		})
		if err := emit(tokenText(req.PromptTokens, i)); err != nil {
			return res, err
		}
		res.CompletionTokens++
	}
	res.FinishReason = "length"
	return res, nil
}

// start checks req and queues it on its rank.
func (w *Worker) start(req Request) (*job, error) {
	w.mu.Lock()
	failing := w.failing
	w.mu.Unlock()
	if failing {
		return nil, ErrInjected5xx
	}
	if req.PromptTokens < 0 || req.MaxTokens < 0 || req.CachedTokens < 0 {
		return nil, ErrInvalid
	}
	if int(req.DPRank) >= w.cfg.DPSize {
		return nil, ErrRankRange
	}
	j := &job{
		rank:     req.DPRank,
		need:     blocksFor(req.PromptTokens+req.MaxTokens, w.cfg.BlockSize),
		held:     blocksFor(req.PromptTokens, w.cfg.BlockSize),
		pending:  max(req.PromptTokens-req.CachedTokens, 0),
		admitted: make(chan struct{}),
	}
	if j.need > w.cfg.TotalKVBlocks {
		return nil, ErrTooLarge
	}
	w.update(j.rank, func(rk *rank) {
		rk.enqueue(j)
		if w.resume == nil {
			rk.admit(w.cfg)
		}
	})
	return j, nil
}

// finish gives back j's blocks or queue place and admits whoever now fits.
func (w *Worker) finish(j *job) {
	w.update(j.rank, func(rk *rank) {
		rk.release(j)
		if w.resume == nil {
			rk.admit(w.cfg)
		}
	})
}

// prefill runs the prompt's new tokens through chunked prefill; each chunk
// is one batch of the polynomial model.
func (w *Worker) prefill(ctx context.Context, j *job) error {
	for j.pending > 0 {
		chunk := min(j.pending, w.cfg.MaxNumBatchedTokens)
		if err := w.pause(ctx, scaled(prefillMillis(chunk), w.cfg.SpeedupRatio)); err != nil {
			return err
		}
		w.update(j.rank, func(rk *rank) {
			rk.prefill -= uint64(chunk)
			j.pending -= chunk
		})
	}
	return nil
}

// stepDuration is the next decode step's time on rank r, at the rank's
// current KV fraction, plus any injected slowness.
func (w *Worker) stepDuration(r uint32) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := float64(w.ranks[r].held) / float64(w.cfg.TotalKVBlocks)
	return scaled(decodeStepMillis(p), w.cfg.SpeedupRatio) + w.slow
}

// pause waits d on the clock, then for as long as the worker is stalled.
func (w *Worker) pause(ctx context.Context, d time.Duration) error {
	if !clock.Sleep(w.clk, d, ctx.Done()) {
		return ctx.Err()
	}
	for {
		w.mu.Lock()
		resume := w.resume
		w.mu.Unlock()
		if resume == nil {
			return ctx.Err()
		}
		select {
		case <-resume:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
