package discovery

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"switchyard/router/events"
)

// Snapshot is an immutable, published fleet view.
type Snapshot struct {
	// Generation moves only when the fleet view changes.
	Generation uint64
	View
	// PublishedAt is the receipt time of the event that produced it.
	PublishedAt time.Time
}

// Worker looks a worker up by identity (binary search: Workers is sorted,
// and publishing builds no index that a large fleet would pay for).
func (s *Snapshot) Worker(k WorkerKey) (*Worker, bool) {
	i := sort.Search(len(s.Workers), func(i int) bool { return !s.Workers[i].Key().less(k) })
	if i < len(s.Workers) && s.Workers[i].Key() == k {
		return s.Workers[i], true
	}
	return nil, false
}

// CountPublishers counts publishers of one topic.
func (s *Snapshot) CountPublishers(topic string) int {
	n := 0
	for _, p := range s.Publishers {
		if p.Topic == topic {
			n++
		}
	}
	return n
}

// Registry holds the current snapshot. Reads are lock-free; publishers are
// serialized. Subscribers learn of new generations through Changed, which
// never pins an old snapshot in memory.
type Registry struct {
	cur     atomic.Pointer[Snapshot]
	mu      sync.Mutex
	changed chan struct{}
}

// NewRegistry returns a registry holding an empty generation-0 snapshot.
func NewRegistry() *Registry {
	r := &Registry{changed: make(chan struct{})}
	r.cur.Store(&Snapshot{})
	return r
}

// Snapshot returns the current snapshot without locking.
func (r *Registry) Snapshot() *Snapshot { return r.cur.Load() }

// Generation is the current snapshot's generation.
func (r *Registry) Generation() uint64 { return r.cur.Load().Generation }

// Changed returns a channel closed at the next generation change.
func (r *Registry) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Publish installs v if it differs from the current view, and reports the
// resulting generation and whether it moved. The snapshot is swapped before
// subscribers are woken, so a woken reader always sees the new generation.
func (r *Registry) Publish(v *View, at time.Time) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cur.Load()
	if sameView(&old.View, v) {
		return old.Generation, false
	}
	s := &Snapshot{Generation: old.Generation + 1, View: *v, PublishedAt: at}
	r.cur.Store(s)
	close(r.changed)
	r.changed = make(chan struct{})
	return s.Generation, true
}

func sameView(a, b *View) bool {
	return slices.EqualFunc(a.Workers, b.Workers, sameWorker) &&
		slices.EqualFunc(a.Publishers, b.Publishers, func(x, y *Publisher) bool { return x == y || *x == *y })
}

func sameWorker(a, b *Worker) bool {
	if a == b {
		return true
	}
	return a.Namespace == b.Namespace && a.InstanceID == b.InstanceID && a.Role == b.Role &&
		a.Model == b.Model && a.Component == b.Component && a.Endpoint == b.Endpoint && a.Host == b.Host && a.Port == b.Port &&
		a.BlockSize == b.BlockSize && sameRuntime(&a.Runtime, &b.Runtime) && a.HasCard == b.HasCard &&
		string(a.Card) == string(b.Card) && a.FirstSeen.Equal(b.FirstSeen) && a.LastUpdated.Equal(b.LastUpdated)
}

func sameRuntime(a, b *RuntimeConfig) bool {
	return eqPtr(a.TotalKVBlocks, b.TotalKVBlocks) && eqPtr(a.MaxNumBatchedTokens, b.MaxNumBatchedTokens) &&
		eqPtr(a.MaxNumSeqs, b.MaxNumSeqs) && eqPtr(a.ContextLength, b.ContextLength) &&
		a.DPStartRank == b.DPStartRank && a.DPSize == b.DPSize && a.DPDeclared == b.DPDeclared &&
		a.DisaggregatedEndpoint == b.DisaggregatedEndpoint
}

func eqPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Follower connects a watcher to a reducer and a registry: it folds each
// batch and publishes once per batch. It is the discovery sink of live
// sources and of the simulator alike.
type Follower struct {
	Reducer   *Reducer
	Registry  *Registry
	connected atomic.Bool
	mixed     mixedWatch
}

// NewFollower pairs a reducer with a registry.
func NewFollower(red *Reducer, reg *Registry) *Follower {
	return &Follower{Reducer: red, Registry: reg}
}

// Apply folds a batch in order, then publishes the resulting view.
func (f *Follower) Apply(batch []events.Event) {
	if len(batch) == 0 {
		return
	}
	for _, ev := range batch {
		f.Reducer.Apply(ev)
	}
	f.Publish(batch[len(batch)-1].Time())
}

// Publish publishes the reducer's view at, and reports the resulting
// generation and whether it moved. Apply publishes once per batch; a host
// that records where each publish happened (replay) folds with
// Reducer.Apply and publishes with this.
func (f *Follower) Publish(at time.Time) (uint64, bool) {
	v := f.Reducer.View()
	gen, moved := f.Registry.Publish(v, at)
	if moved {
		f.mixed.observe(f.Reducer.log, v)
	}
	return gen, moved
}

// SetConnected records whether the source's watches are open.
func (f *Follower) SetConnected(c bool) { f.connected.Store(c) }

// Connected reports the last SetConnected value.
func (f *Follower) Connected() bool { return f.connected.Load() }
