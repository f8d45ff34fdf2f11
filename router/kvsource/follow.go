package kvsource

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"switchyard/router/clock"
	"switchyard/router/eventplane"
	"switchyard/router/kv"
)

// Timings and bounds of a followed source.
const (
	// BackoffInitial and BackoffMax bound the full-jitter delay between
	// failed opens; a stream that carried events reopens at once.
	BackoffInitial = 500 * time.Millisecond
	BackoffMax     = 30 * time.Second
	// ReadTimeout drops a stream silent this long: a listener writes a
	// keepalive every 10 s.
	ReadTimeout = 35 * time.Second
	// StaleAfter clears a source's ranks when it has had no stream this
	// long (the kv-events staleness rule's 60 s).
	StaleAfter = 60 * time.Second
	// MaxWorkers caps the workers remembered per source for clearing.
	MaxWorkers = 16384
)

// Opener opens announced streams: the router's event-bus listener.
type Opener interface {
	OpenAnnouncedStream(ctx context.Context, backend string, lastEventID *uint64) (net.Conn, error)
	Announces(backend string) bool
	Changed() <-chan struct{}
}

// Sink is where events go: the core, through the inputs a kv-events
// subscription uses, so they are recorded and replayed alike.
type Sink interface {
	KVMessage(namespace string, publisherID uint64, frames [][]byte, at time.Time) string
	KVPublisherLost(namespace string, publisherID uint64, at time.Time) int
}

// Source is one configured kv_cache_index source: a backend announced by
// kv-listeners, whose workers register in Namespace.
type Source struct {
	Backend   string
	Namespace string
}

// Follower follows a set of sources, one goroutine each.
type Follower struct {
	open Opener
	sink Sink
	clk  clock.Clock
	log  *slog.Logger
	met  *Metrics
	seed uint64

	mu      sync.Mutex
	running map[string]*follow // by backend
}

// NewFollower follows nothing until Apply. seed seeds the reconnect
// jitter.
func NewFollower(open Opener, sink Sink, clk clock.Clock, log *slog.Logger, met *Metrics, seed uint64) *Follower {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if met == nil {
		met = NewMetrics()
	}
	return &Follower{open: open, sink: sink, clk: clk, log: log, met: met, seed: seed, running: map[string]*follow{}}
}

// Apply follows exactly sources: a source kept unchanged keeps its stream
// and its last id; a removed one (or one whose namespace changed) stops
// and its ranks are cleared.
func (f *Follower) Apply(sources []Source) {
	f.mu.Lock()
	defer f.mu.Unlock()
	want := map[string]Source{}
	for _, s := range sources {
		want[s.Backend] = s
	}
	for b, r := range f.running {
		if s, ok := want[b]; !ok || s != r.src {
			r.stop(CauseRemoved)
			delete(f.running, b)
		}
	}
	for b, s := range want {
		if f.running[b] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &follow{f: f, src: s, cancel: cancel, done: make(chan struct{}), workers: map[uint64]struct{}{},
			rng: rand.New(rand.NewPCG(f.seed, uint64(len(f.running))+uint64(len(b))))}
		f.running[b] = r
		go r.run(ctx)
	}
	f.met.Sources.Set(float64(len(f.running)))
}

// Metrics are the follower's collectors.
func (f *Follower) Metrics() *Metrics { return f.met }

// Stop ends every stream; ranks stay as they are.
func (f *Follower) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for b, r := range f.running {
		r.stop("")
		delete(f.running, b)
	}
	f.met.Sources.Set(0)
}

// State is a source's state, for the admin API and tests.
type State struct {
	Backend     string `json:"backend"`
	Namespace   string `json:"namespace"`
	Connected   bool   `json:"connected"`
	LastEventID uint64 `json:"last_event_id"`
	HasLastID   bool   `json:"has_last_event_id"`
	Workers     int    `json:"workers"`
}

// States lists the sources by backend.
func (f *Follower) States() []State {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]State, 0, len(f.running))
	for _, r := range f.running {
		r.mu.Lock()
		out = append(out, State{Backend: r.src.Backend, Namespace: r.src.Namespace, Connected: r.connected,
			LastEventID: r.lastID, HasLastID: r.hasLast, Workers: len(r.workers)})
		r.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b State) int {
		switch {
		case a.Backend < b.Backend:
			return -1
		case a.Backend > b.Backend:
			return 1
		}
		return 0
	})
	return out
}

// follow is one source's loop.
type follow struct {
	f      *Follower
	src    Source
	cancel context.CancelFunc
	done   chan struct{}
	rng    *rand.Rand

	mu        sync.Mutex
	connected bool
	lastID    uint64
	hasLast   bool
	workers   map[uint64]struct{} // workers whose events reached the index
}

// stop ends the loop; a cause clears the source's ranks.
func (r *follow) stop(cause string) {
	r.cancel()
	<-r.done
	if cause != "" {
		r.clear(cause)
	}
}

func (r *follow) run(ctx context.Context) {
	defer close(r.done)
	f := r.f
	log := f.log.With("backend", r.src.Backend, "namespace", r.src.Namespace)
	delay := BackoffInitial
	down := f.clk.Now()
	cleared := false
	for ctx.Err() == nil {
		if !cleared && f.clk.Now().Sub(down) >= StaleAfter {
			cleared = true
			if n := r.clear(CauseStale); n > 0 {
				log.Warn("kv source without a stream for too long; the blocks it reported are no longer trusted", "ranks_cleared", n)
			}
		}
		if !f.open.Announces(r.src.Backend) {
			// No listener announces the backend: wait for a session
			// change, or for the stale deadline.
			changed := f.open.Changed()
			if f.open.Announces(r.src.Backend) {
				continue
			}
			wait := StaleAfter
			if !cleared {
				wait = max(StaleAfter-f.clk.Now().Sub(down), time.Millisecond)
			}
			t := f.clk.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-changed:
			case <-t.C():
			}
			t.Stop()
			continue
		}
		carried, err := r.stream(ctx, log)
		if ctx.Err() != nil {
			return
		}
		if carried {
			delay = BackoffInitial
			down, cleared = f.clk.Now(), false
			log.Info("kv source stream ended; resuming", "error", err)
			continue // a draining listener's consumers fail over at once
		}
		wait := time.Duration(r.rng.Int64N(int64(delay))) + time.Millisecond
		log.Warn("kv source stream not opened; retrying", "error", err, "in", wait.Round(time.Millisecond))
		delay = min(2*delay, BackoffMax)
		if !clock.Sleep(f.clk, wait, ctx.Done()) {
			return
		}
	}
}

func (r *follow) last() *uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.hasLast {
		return nil
	}
	id := r.lastID
	return &id
}

// stream opens the source from the last id and applies its events until
// it ends; carried reports whether it opened.
func (r *follow) stream(ctx context.Context, log *slog.Logger) (carried bool, err error) {
	f := r.f
	conn, err := f.open.OpenAnnouncedStream(ctx, r.src.Backend, r.last())
	if err != nil {
		code := StreamResultBroken
		var be *eventplane.BusError
		if errors.As(err, &be) {
			code = be.Code
		}
		f.met.Streams.WithLabelValues(code).Inc()
		return false, err
	}
	f.met.Streams.WithLabelValues("opened").Inc()
	stopWatch := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopWatch()
	defer conn.Close()
	r.setConnected(true)
	defer r.setConnected(false)
	log.Info("kv source stream open", "last_event_id", r.last())

	p := NewParser(deadlineReader{conn})
	for {
		ev, err := p.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
				f.met.Streams.WithLabelValues(StreamResultBroken).Inc()
			}
			return true, err
		}
		r.apply(ev, log)
	}
}

// deadlineReader drops a stream silent for ReadTimeout.
type deadlineReader struct{ c net.Conn }

func (d deadlineReader) Read(b []byte) (int, error) {
	_ = d.c.SetReadDeadline(time.Now().Add(ReadTimeout))
	return d.c.Read(b)
}

func (r *follow) setConnected(on bool) {
	r.mu.Lock()
	r.connected = on
	r.mu.Unlock()
	if on {
		r.f.met.Connected.Inc()
	} else {
		r.f.met.Connected.Dec()
	}
}

// apply feeds one SSE event into the core.
func (r *follow) apply(ev SSEEvent, log *slog.Logger) {
	f := r.f
	if ev.Type != TypeKV && ev.Type != TypeReset {
		f.met.Events.WithLabelValues(ResultUnknownType).Inc()
		return
	}
	r.mu.Lock()
	inOrder := ev.HasID && (!r.hasLast || ev.ID > r.lastID)
	r.mu.Unlock()
	// A reset re-bases the ids whatever they were: another listener, or
	// this one restarted, numbers its own way.
	if !inOrder && !(ev.Type == TypeReset && ev.HasID) {
		f.met.Events.WithLabelValues(ResultOutOfOrder).Inc()
		return
	}
	if ev.Type == TypeReset {
		n := r.clear(CauseReset)
		r.advance(ev.ID)
		log.Warn("kv source reset: events after the last id are lost; the backend's blocks were cleared", "ranks_cleared", n)
		return
	}
	e, err := ParseEvent(ev.Data)
	r.advance(ev.ID)
	if err != nil {
		// The rank's next event shows a gap in its event ids, which
		// clears it.
		f.met.Events.WithLabelValues(ResultBadEvent).Inc()
		return
	}
	at := f.clk.Now()
	res := f.sink.KVMessage(r.src.Namespace, e.WorkerID, Frames(&e, ev.ID, at), at)
	f.met.Events.WithLabelValues(res).Inc()
	switch res {
	case kv.Applied.String(), kv.Replay.String(), kv.Gap.String(), kv.ParentNotFound.String(), kv.UnknownBlock.String():
		r.mu.Lock()
		if len(r.workers) < MaxWorkers {
			r.workers[e.WorkerID] = struct{}{}
		}
		r.mu.Unlock()
	}
}

func (r *follow) advance(id uint64) {
	r.mu.Lock()
	r.lastID, r.hasLast = id, true
	r.mu.Unlock()
}

// clear drops the ranks of every worker the source reported.
func (r *follow) clear(cause string) int {
	r.mu.Lock()
	ids := make([]uint64, 0, len(r.workers))
	for id := range r.workers {
		ids = append(ids, id)
	}
	clear(r.workers)
	r.mu.Unlock()
	slices.Sort(ids)
	n := 0
	at := r.f.clk.Now()
	for _, id := range ids {
		n += r.f.sink.KVPublisherLost(r.src.Namespace, id, at)
	}
	r.f.met.Resets.WithLabelValues(cause).Inc()
	return n
}
