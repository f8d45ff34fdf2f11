package etcdsource

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"switchyard/router/clock"
	"switchyard/router/events"
)

// seedTimeout bounds a pass's dial, authentication, range gets and watch
// creation together; the watches themselves then run unbounded.
const seedTimeout = 30 * time.Second

// Sink is the host side of a watcher.
type Sink interface {
	// Apply receives a batch of events (in order) from the watcher
	// goroutine; the host folds them into the reducer and publishes once
	// per batch.
	Apply(batch []events.Event)
	// SetConnected reports whether all watches of the current pass are open.
	SetConnected(bool)
}

// Status is what the admin API shows about a watcher. It carries no
// endpoints or credentials.
type Status struct {
	// Connected: every watch of the current pass is open.
	Connected bool
	// Passes counts passes started; Resyncs counts snapshots delivered.
	Passes, Resyncs uint64
	// LastError says why the latest pass ended, without addresses; empty
	// until one has ended.
	LastError string
	// LastErrorAt is when it ended, on the watcher's Clock.
	LastErrorAt time.Time
}

// Watcher runs discovery passes against one etcd cluster for a fixed set of
// namespaces. A configuration change replaces the Watcher.
type Watcher struct {
	cfg   Config
	list  []watched
	sink  Sink
	clk   clock.Clock
	log   *slog.Logger
	count func(kind string)

	// beforeWatch, when a test sets it, runs after the snapshot has been
	// delivered and before the watches open, so the test can change or
	// compact the store in between.
	beforeWatch func()

	mu     sync.Mutex
	status Status
}

// New makes a watcher; nothing happens until Run. log and count may be nil.
func New(cfg Config, sink Sink, clk clock.Clock, log *slog.Logger, count func(kind string)) *Watcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if count == nil {
		count = func(string) {}
	}
	return &Watcher{
		cfg:   cfg,
		list:  watchList(cfg.Namespaces),
		sink:  sink,
		clk:   clk,
		log:   log,
		count: count,
	}
}

// Run performs passes until ctx ends, then returns nil. It returns an error
// at once only for a Config no pass could use.
func (w *Watcher) Run(ctx context.Context) error {
	if err := w.cfg.check(); err != nil {
		return err
	}
	b := newBackoff(w.cfg.BackoffInitial, w.cfg.BackoffMax)
	for {
		var dials dialErrors
		end := w.pass(ctx, &dials)
		if ctx.Err() != nil {
			return nil
		}
		w.count(end.kind)
		delay := b.next(end.openFor)
		w.noteEnd(end)
		w.logEnd(end, dials.summary(), delay)
		if !clock.Sleep(w.clk, delay, ctx.Done()) {
			return nil
		}
	}
}

// logEnd warns that a pass ended, naming the endpoints and, when a
// connection could not be made, why: gRPC itself reports only a state.
func (w *Watcher) logEnd(end passEnd, dialErr string, retryIn time.Duration) {
	attrs := []any{"endpoints", w.cfg.Endpoints, "kind", end.kind, "stage", end.stage, "error", end.err}
	if dialErr != "" && end.kind != KindCompacted {
		attrs = append(attrs, "dial_error", dialErr)
	}
	attrs = append(attrs, "open_for", end.openFor, "retry_in", retryIn)
	w.log.Warn("etcd discovery pass ended", attrs...)
}

// Status returns a copy of the current status.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

// Restarts counts passes started after an earlier pass ended.
func (w *Watcher) Restarts() uint64 {
	s := w.Status()
	if s.Passes == 0 {
		return 0
	}
	return s.Passes - 1
}

func (w *Watcher) noteEnd(end passEnd) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.status.LastError = end.summary()
	w.status.LastErrorAt = w.clk.Now()
}

func (w *Watcher) setConnected(up bool) {
	w.mu.Lock()
	w.status.Connected = up
	w.mu.Unlock()
	w.sink.SetConnected(up)
}

// deliverSnapshot hands the host one DiscoveryResync per namespace, all in
// one batch so the host publishes the whole fresh view at once.
func (w *Watcher) deliverSnapshot(s snapshot) {
	at := w.clk.Now()
	batch := make([]events.Event, 0, len(w.cfg.Namespaces))
	total := 0
	for _, ns := range w.cfg.Namespaces {
		recs := s.records[ns]
		total += len(recs)
		batch = append(batch, events.DiscoveryResync{At: at, Namespace: ns, Records: recs, Revision: s.revision})
	}
	w.sink.Apply(batch)
	w.mu.Lock()
	w.status.Resyncs++
	w.mu.Unlock()
	w.count(KindResync)
	for _, key := range s.skipped {
		w.count(KindSeedOversized)
		w.log.Warn("etcd discovery skipped a record too large to read", "key", key, "limit_bytes", maxResponseBytes)
	}
	for _, key := range s.truncated {
		w.count(KindSeedTruncated)
		w.log.Warn("etcd discovery snapshot truncated", "prefix", key, "kept", maxSeedRecords)
	}
	w.log.Info("etcd discovery snapshot", "namespaces", len(w.cfg.Namespaces), "records", total, "revision", s.revision)
}
