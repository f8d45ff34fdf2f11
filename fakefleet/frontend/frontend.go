// Package frontend emulates `dynamo.frontend --router-mode direct` in front
// of fake workers: an OpenAI HTTP server that does no routing of its own
// and serves each request on the workers named by the x-dynamo-* pin
// headers, with the direct-mode frontend's refusals. The router's shim
// dispatch can be tested against it end to end, without Dynamo.
package frontend

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"switchyard/fakefleet/worker"
)

// Directory resolves pinned instance ids to live workers.
// Generator is a worker the frontend runs requests on: fakefleet/worker,
// or an engine-backed one.
type Generator interface {
	Generate(ctx context.Context, req worker.Request, emit func(text string) error) (worker.Result, error)
	Config() worker.Config
}

type Directory interface {
	// Worker returns the live worker with this instance id and the model
	// it serves.
	Worker(instanceID uint64) (Generator, string, bool)
	// HasPrefill reports whether prefill-role workers are registered for
	// the model; the frontend then demands a prefill pin.
	HasPrefill(model string) bool
	// Models lists the served model names.
	Models() []string
}

// Response headers naming the workers that served a request, for tests
// (the real frontend discloses nothing of the kind).
const (
	HeaderWorker        = "X-Fake-Worker"
	HeaderPrefillWorker = "X-Fake-Prefill-Worker"
)

// Frontend is the HTTP handler.
type Frontend struct {
	dir     Directory
	log     *slog.Logger
	mux     *http.ServeMux
	seq     atomic.Uint64 // response ids
	prompts Prompter      // nil: prompts are estimated, not tokenized

	// Faults of the frontend itself, for every model and worker: delay
	// is added before each hop to a worker, and while failing every
	// request is answered 500 without reaching one.
	delay   atomic.Int64 // nanoseconds
	failing atomic.Bool
}

// ShimFailure is the error message of a request refused while failing.
const ShimFailure = "the direct-mode frontend is failing (injected fault)"

// SetDelay makes every hop to a worker (the prefill hop and the decode
// hop) wait d first, as a slow frontend would; 0 ends it.
func (f *Frontend) SetDelay(d time.Duration) { f.delay.Store(int64(max(d, 0))) }

// SetFailing makes the frontend answer every generation request with a
// 500 before it reaches a worker (on), or serve again.
func (f *Frontend) SetFailing(on bool) { f.failing.Store(on) }

// hopDelay waits the injected delay before a hop, or until ctx ends.
func (f *Frontend) hopDelay(ctx context.Context) error {
	d := time.Duration(f.delay.Load())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// New makes a frontend over dir; log may be nil.
func New(dir Directory, log *slog.Logger) *Frontend {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Frontend{dir: dir, log: log, mux: http.NewServeMux()}
	f.mux.HandleFunc("POST /v1/chat/completions", handle[chatBody](f))
	f.mux.HandleFunc("POST /v1/completions", handle[completionBody](f))
	f.mux.HandleFunc("POST /v1/responses", handle[responsesBody](f))
	f.mux.HandleFunc("GET /v1/models", f.models)
	f.mux.HandleFunc("GET /health", f.health)
	return f
}

// ServeHTTP implements http.Handler.
func (f *Frontend) ServeHTTP(w http.ResponseWriter, r *http.Request) { f.mux.ServeHTTP(w, r) }

type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (f *Frontend) models(w http.ResponseWriter, _ *http.Request) {
	now := time.Now().Unix()
	data := []modelEntry{}
	for _, m := range f.dir.Models() {
		data = append(data, modelEntry{ID: m, Object: "model", Created: now, OwnedBy: "nvidia"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (f *Frontend) health(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"status": "healthy", "models": f.dir.Models()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, errorJSON(errInternal(err.Error()))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
