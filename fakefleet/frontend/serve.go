package frontend

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"

	"switchyard/fakefleet/worker"
)

// plan is where a request runs: the decode worker always, and a prefill
// worker first on the disaggregated path.
type plan struct {
	decode      Generator
	decodeID    uint64
	decodeRank  uint32
	prefill     Generator // nil: aggregated path
	prefillID   uint64
	prefillRank uint32
}

// bodyOf is a request body the emulation sizes a prompt from.
type bodyOf[T any] interface {
	*T
	toInput() (input, *apiError)
}

// handle is an ingress: decode its body, size its prompt, serve it.
func handle[T any, B bodyOf[T]](f *Frontend) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body := B(new(T))
		raw, err := decodeBody(w, r, body)
		if err != nil {
			writeError(w, err)
			return
		}
		in, err := body.toInput()
		if err != nil {
			writeError(w, err)
			return
		}
		in.raw = raw
		f.tokenize(r.Context(), &in)
		f.serve(w, r, in)
	}
}

func (f *Frontend) serve(w http.ResponseWriter, r *http.Request, in input) {
	if f.failing.Load() {
		writeError(w, errInternal(ShimFailure))
		return
	}
	if !slices.Contains(f.dir.Models(), in.model) {
		writeError(w, &apiError{http.StatusNotFound, "model_not_found", "Model not found: " + in.model})
		return
	}
	pl, aerr := f.resolve(in.model, readPins(r.Header))
	if aerr != nil {
		f.log.Info("fake frontend refused a request", "model", in.model, "status", aerr.status, "error", aerr.msg)
		writeError(w, aerr)
		return
	}
	w.Header().Set(HeaderWorker, strconv.FormatUint(pl.decodeID, 10))
	if pl.prefill != nil {
		w.Header().Set(HeaderPrefillWorker, strconv.FormatUint(pl.prefillID, 10))
	}
	switch {
	case in.api == apiResponses && in.stream:
		f.streamedResponse(w, r, in, pl)
	case in.api == apiResponses:
		f.bufferedResponse(w, r, in, pl)
	case in.stream:
		f.streamed(w, r, in, pl)
	default:
		f.buffered(w, r, in, pl)
	}
}

// resolve turns pins into workers, refusing as the direct-mode frontend
// does: no decode pin is a bad request; a disaggregated model without a
// prefill pin is the prefill router's 503; an id that is not a worker of
// the model in the needed role is "not found". A prefill pin for a model
// without prefill workers is ignored, since no prefill stage runs.
func (f *Frontend) resolve(model string, p pins) (plan, *apiError) {
	if !p.hasWorker {
		return plan{}, errBadRequest("Direct routing mode requires a worker instance id: set x-dynamo-worker-instance-id")
	}
	pl := plan{decodeID: p.worker, decodeRank: p.dpRank}
	if f.dir.HasPrefill(model) {
		if !p.hasPrefill {
			return plan{}, &apiError{http.StatusServiceUnavailable, "service_unavailable", prefillIDRequired}
		}
		pw, ok := f.lookup(p.prefill, model, true)
		if !ok {
			return plan{}, errNotFound(p.prefill)
		}
		pl.prefill, pl.prefillID, pl.prefillRank = pw, p.prefill, p.prefillDPRank
	}
	dw, ok := f.lookup(p.worker, model, false)
	if !ok {
		return plan{}, errNotFound(p.worker)
	}
	pl.decode = dw
	return pl, nil
}

// lookup finds a worker of model in the prefill role, or in a serving
// (decode or aggregated) role: Dynamo keeps the two in separate components,
// so an id from the other set is unknown to the router that looks it up.
func (f *Frontend) lookup(id uint64, model string, prefill bool) (Generator, bool) {
	wk, m, ok := f.dir.Worker(id)
	if !ok || m != model || (wk.Config().Role == worker.RolePrefill) != prefill {
		return nil, false
	}
	return wk, true
}

// generate runs the plan: the prefill hop (one token, discarded) on the
// prefill worker, then the decode on the decode worker, which finds the
// prompt's KV already transferred and so does not prefill it again.
func (f *Frontend) generate(ctx context.Context, pl plan, in input, emit func(string) error) (worker.Result, error) {
	cached := 0
	if pl.prefill != nil {
		if err := f.hopDelay(ctx); err != nil {
			return worker.Result{}, err
		}
		req := worker.Request{DPRank: pl.prefillRank, PromptTokens: in.promptTokens, MaxTokens: 1, PromptID: in.promptID, Tokens: in.tokens}
		if _, err := pl.prefill.Generate(ctx, req, nil); err != nil {
			return worker.Result{}, &hopError{pl.prefillID, pl.prefillRank, err}
		}
		cached = in.promptTokens
	}
	req := worker.Request{DPRank: pl.decodeRank, PromptTokens: in.promptTokens, MaxTokens: in.maxTokens, CachedTokens: cached,
		PromptID: in.promptID, Tokens: in.tokens}
	if err := f.hopDelay(ctx); err != nil {
		return worker.Result{}, err
	}
	res, err := pl.decode.Generate(ctx, req, emit)
	if err != nil {
		return res, &hopError{pl.decodeID, pl.decodeRank, err}
	}
	return res, nil
}

// hopError is a worker's failure, with the worker it came from.
type hopError struct {
	id   uint64
	rank uint32
	err  error
}

func (e *hopError) Error() string { return e.err.Error() }
func (e *hopError) Unwrap() error { return e.err }

// answer maps a worker failure to the response the frontend gives.
func answer(err error) *apiError {
	var h *hopError
	if !errors.As(err, &h) {
		return errGenerate("%v", err)
	}
	switch {
	case errors.Is(err, worker.ErrTooLarge):
		return errBadRequest("request exceeds the KV cache of instance_id=%d dp_rank=%d", h.id, h.rank)
	case errors.Is(err, worker.ErrRankRange):
		return errGenerate("dp_rank=%d out of range for instance_id=%d", h.rank, h.id)
	}
	return errGenerate("instance_id=%d: %v", h.id, h.err)
}
