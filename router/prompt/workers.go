package prompt

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Renders run on long-lived worker goroutines rather than one new
// goroutine each: a template engine recurses deeply, and a fresh
// goroutine's small stack was grown and copied on every render (a
// twentieth of the router's CPU per KV-routed request). A worker keeps
// its grown stack between renders.
//
// At most Permits workers exist. A worker whose render overran its
// deadline is abandoned by its caller and comes back only when the render
// returns, so runaway templates hold at most Permits goroutines.
type renderers struct {
	idle chan *worker // parked workers; capacity Permits, so a put never blocks

	mu      sync.Mutex
	workers int
	closed  bool
	quit    chan struct{}
}

func newRenderers(permits int) renderers {
	return renderers{idle: make(chan *worker, permits), quit: make(chan struct{})}
}

// Worker states, one render at a time.
const (
	stateRunning int32 = iota
	stateFinished
	stateAbandoned
)

type worker struct {
	r       *renderers
	observe func(time.Duration)

	// Set by the caller before the render starts (the send on start
	// publishes them to the worker).
	ctx   context.Context
	job   func(context.Context) ([]uint32, error)
	start chan struct{}

	// out is the render's outcome, written before state leaves running
	// and done is signalled.
	out   outcome
	state atomic.Int32
	done  chan struct{}
}

// start starts a new worker while fewer than Permits exist and the
// service is open; nil otherwise.
func (s *Service) start() *worker {
	r := &s.renderers
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.workers >= cap(r.idle) {
		return nil
	}
	r.workers++
	w := &worker{r: r, observe: s.observe, start: make(chan struct{}, 1), done: make(chan struct{}, 1)}
	go w.loop()
	return w
}

// give hands the worker a render.
func (w *worker) give(ctx context.Context, job func(context.Context) ([]uint32, error)) {
	w.ctx, w.job = ctx, job
	w.state.Store(stateRunning)
	w.start <- struct{}{}
}

// abandon gives up on the current render; false when it has already
// finished (its outcome is then signalled on done).
func (w *worker) abandon() bool { return w.state.CompareAndSwap(stateRunning, stateAbandoned) }

// collect takes the outcome of a worker's finished render and parks the
// worker.
func (s *Service) collect(w *worker) ([]uint32, string) {
	o := w.out
	s.idle <- w
	return result(o)
}

func (w *worker) loop() {
	defer func() {
		w.r.mu.Lock()
		w.r.workers--
		w.r.mu.Unlock()
	}()
	for {
		select {
		case <-w.start:
		case <-w.r.quit:
			return
		}
		begin := time.Now()
		ids, err := w.render()
		w.ctx, w.job = nil, nil
		w.observe(time.Since(begin))
		w.out = outcome{ids, err}
		if w.state.CompareAndSwap(stateRunning, stateFinished) {
			w.done <- struct{}{}
		} else {
			w.out = outcome{} // abandoned: nobody reads it; park again
			w.r.idle <- w
		}
	}
}

// render runs the job, a panic becoming an error.
func (w *worker) render() (ids []uint32, err error) {
	defer func() {
		if p := recover(); p != nil {
			ids, err = nil, errRenderPanicked
		}
	}()
	return w.job(w.ctx)
}

var errRenderPanicked = errors.New("render panicked")

// Close stops the service's render workers, a render in progress first
// returning. Renders asked for after Close are counted
// render_unavailable.
func (s *Service) Close() {
	r := &s.renderers
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		close(r.quit)
	}
}
