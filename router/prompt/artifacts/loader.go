package artifacts

import (
	"context"
	"fmt"
	"sync"
	"time"

	"switchyard/router/clock"
)

// LoadFunc turns an artifact's verified bytes into a value and reports the
// memory the value holds, which the loader budgets. A tokenizer plugs in
// tokenizer.Load, a template its parser.
type LoadFunc[T any] func(data []byte) (value T, cost int64, err error)

// LoaderLimits bound a Loader; zero fields take the defaults.
type LoaderLimits struct {
	// MaxEntries caps loaded values kept (default 16).
	MaxEntries int
	// MaxConcurrent caps loads running at once (default 2); more wait.
	MaxConcurrent int
	// MaxBytes caps the summed cost of loaded values (default 256 MiB).
	MaxBytes int64
	// RetryAfter is how long a failed artifact is left alone (default 5m).
	RetryAfter time.Duration
}

// Loader defaults.
const (
	DefaultMaxEntries    = 16
	DefaultMaxConcurrent = 2
	DefaultMaxBytes      = 256 << 20
	DefaultRetryAfter    = 5 * time.Minute
)

func (l LoaderLimits) withDefaults() LoaderLimits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	if l.MaxConcurrent <= 0 {
		l.MaxConcurrent = DefaultMaxConcurrent
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.RetryAfter <= 0 {
		l.RetryAfter = DefaultRetryAfter
	}
	return l
}

// Status is where an artifact's value stands.
type Status int

const (
	// StatusReady: the value is returned.
	StatusReady Status = iota
	// StatusLoading: a load is queued or running; ask again later.
	StatusLoading
	// StatusFailed: the last load failed less than RetryAfter ago.
	StatusFailed
	// StatusUnpinned: the checksum is not pinned; nothing is loaded.
	StatusUnpinned
)

func (s Status) String() string {
	switch s {
	case StatusReady:
		return "ready"
	case StatusLoading:
		return "loading"
	case StatusFailed:
		return "failed"
	case StatusUnpinned:
		return "unpinned"
	}
	return "unknown"
}

// Loader keeps the values loaded from pinned artifacts, keyed by checksum
// (equal bytes load to equal values, whichever worker or path named them).
// Get never blocks on I/O: a miss starts a load in the background and
// answers StatusLoading. Every load is fetched through the Store, so pins
// and allow flags apply. Entries, queued loads and failures are at most one
// per pinned checksum, so the pin list bounds them all.
type Loader[T any] struct {
	store  *Store
	clock  clock.Clock
	load   LoadFunc[T]
	limits LoaderLimits
	sem    chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	entries map[Checksum]*entry[T]
	ready   int
	bytes   int64
	useSeq  uint64
	changed chan struct{} // closed and replaced whenever an entry settles
}

type entry[T any] struct {
	status   Status
	value    T
	cost     int64
	err      error
	failedAt time.Time
	lastUse  uint64
}

// NewLoader returns a loader fetching through store. Removing a pin with
// store.Reload drops what was loaded from it. Close stops it.
func NewLoader[T any](store *Store, clk clock.Clock, load LoadFunc[T], limits LoaderLimits) *Loader[T] {
	limits = limits.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	l := &Loader[T]{
		store: store, clock: clk, load: load, limits: limits,
		sem: make(chan struct{}, limits.MaxConcurrent), ctx: ctx, cancel: cancel,
		entries: map[Checksum]*entry[T]{}, changed: make(chan struct{}),
	}
	store.addReloadHook(l.dropUnpinned)
	return l
}

// Get returns the value loaded from f when it is ready. Otherwise it
// returns at once: StatusLoading after starting a load (unless one is
// under way), StatusFailed with the last error while a failure is recent,
// StatusUnpinned for a checksum not pinned. model names the request's
// model in logs.
func (l *Loader[T]) Get(model string, f CheckedFile) (T, Status, error) {
	var zero T
	if !l.store.Pinned(f.Checksum) {
		l.store.noteUnpinned(model, f)
		return zero, StatusUnpinned, ErrUnpinned
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[f.Checksum]
	switch {
	case e == nil:
	case e.status == StatusReady:
		l.useSeq++
		e.lastUse = l.useSeq
		return e.value, StatusReady, nil
	case e.status == StatusLoading:
		return zero, StatusLoading, nil
	case l.clock.Now().Sub(e.failedAt) < l.limits.RetryAfter:
		return zero, StatusFailed, e.err
	}
	e = &entry[T]{status: StatusLoading}
	l.entries[f.Checksum] = e
	l.wg.Add(1)
	go l.run(model, f, e)
	return zero, StatusLoading, nil
}

// run is one background load: wait for a slot, fetch, load, settle.
func (l *Loader[T]) run(model string, f CheckedFile, e *entry[T]) {
	defer l.wg.Done()
	select {
	case l.sem <- struct{}{}:
	case <-l.ctx.Done():
		l.settle(f.Checksum, e, *new(T), 0, l.ctx.Err())
		return
	}
	defer func() { <-l.sem }()
	if !l.current(f.Checksum, e) { // unpinned while queued
		return
	}
	v, cost, err := l.fetchAndLoad(model, f)
	if err != nil {
		l.store.log.Warn("artifact load failed; retried later", "model", model, "checksum", f.Checksum,
			"retry_after", l.limits.RetryAfter, "err", err)
	}
	l.settle(f.Checksum, e, v, cost, err)
}

func (l *Loader[T]) fetchAndLoad(model string, f CheckedFile) (v T, cost int64, err error) {
	data, err := l.store.Fetch(l.ctx, model, f)
	if err != nil {
		return v, 0, err
	}
	// The bytes are pinned and verified, but a loader bug must not take
	// the router down with it.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("loading %s panicked: %v", f.Checksum, r)
			l.store.metrics.Count(ResultFailed)
		}
	}()
	v, cost, err = l.load(data)
	switch {
	case err != nil:
		l.store.metrics.Count(ResultFailed)
		return v, 0, &Error{Result: ResultFailed, Where: string(f.Checksum), Reason: "loading", Err: err}
	case cost > l.limits.MaxBytes:
		l.store.metrics.Count(ResultTooLarge)
		return v, 0, refusal(ResultTooLarge, string(f.Checksum), "loaded value holds %d bytes, the loader's budget is %d", cost, l.limits.MaxBytes)
	}
	return v, max(cost, 0), nil
}

func (l *Loader[T]) current(c Checksum, e *entry[T]) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries[c] == e
}

// settle records a finished load, unless its entry was dropped meanwhile
// (its pin removed), evicting least recently used values to make room.
func (l *Loader[T]) settle(c Checksum, e *entry[T], v T, cost int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.notify()
	if l.entries[c] != e {
		return
	}
	if err != nil {
		e.status, e.err, e.failedAt = StatusFailed, err, l.clock.Now()
		return
	}
	for l.ready >= l.limits.MaxEntries || l.bytes+cost > l.limits.MaxBytes {
		if !l.evictOldest() {
			break
		}
	}
	l.useSeq++
	e.status, e.value, e.cost, e.lastUse = StatusReady, v, cost, l.useSeq
	l.ready++
	l.bytes += cost
}

// evictOldest drops the least recently used ready value.
func (l *Loader[T]) evictOldest() bool {
	var oldest Checksum
	var found *entry[T]
	for c, e := range l.entries {
		if e.status == StatusReady && (found == nil || e.lastUse < found.lastUse) {
			oldest, found = c, e
		}
	}
	if found == nil {
		return false
	}
	l.remove(oldest, found)
	return true
}

func (l *Loader[T]) remove(c Checksum, e *entry[T]) {
	if e.status == StatusReady {
		l.ready--
		l.bytes -= e.cost
	}
	delete(l.entries, c)
}

// dropUnpinned forgets every entry whose pin is gone: ready values are
// released, running loads are discarded when they finish.
func (l *Loader[T]) dropUnpinned() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c, e := range l.entries {
		if !l.store.Pinned(c) {
			l.remove(c, e)
		}
	}
	l.notify()
}

func (l *Loader[T]) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Stats is a loader's occupancy.
type Stats struct {
	Ready, Loading, Failed int
	Bytes                  int64
}

// Stats reports the loader's occupancy.
func (l *Loader[T]) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{Ready: l.ready, Bytes: l.bytes}
	for _, e := range l.entries {
		switch e.status {
		case StatusLoading:
			s.Loading++
		case StatusFailed:
			s.Failed++
		}
	}
	return s
}

// Wait blocks until no load is queued or running, or ctx ends. Tools and
// tests use it; the request path never waits.
func (l *Loader[T]) Wait(ctx context.Context) error {
	for {
		l.mu.Lock()
		loading := 0
		for _, e := range l.entries {
			if e.status == StatusLoading {
				loading++
			}
		}
		ch := l.changed
		l.mu.Unlock()
		if loading == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops queued and running loads and waits for them to end.
func (l *Loader[T]) Close() {
	l.cancel()
	l.wg.Wait()
}
