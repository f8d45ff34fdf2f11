package load

import (
	"sync"
	"time"

	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/events"
)

// Compiled-in ceilings.
const (
	// MaxEntries caps (worker, dp_rank) samples held.
	MaxEntries = 65536
	// MaxPayloadBytes refuses a kv_metrics payload before parsing.
	MaxPayloadBytes = 16 << 10
	// DefaultMaxStaleness is dynamo.load.max_staleness's default.
	DefaultMaxStaleness = 3 * time.Second
)

// Key names one worker rank. The namespace is the discovery namespace the
// worker and its publisher were found in.
type Key struct {
	Namespace string
	WorkerID  uint64
	DPRank    uint32
}

// Sample is the latest load of one rank and where it came from.
type Sample struct {
	ActiveLoad
	PublisherID uint64
	Sequence    uint64
	// ReceivedAt is the receipt time of the message that carried it.
	ReceivedAt time.Time
}

type publisher struct {
	namespace string
	id        uint64
}

// stream is the ordered-TCP-stream state of one subscription.
type stream struct {
	last uint64
	seen bool
}

type worker struct {
	namespace string
	id        uint64
}

type rankRange struct{ start, size uint32 }

// Store holds the latest sample per rank. It is safe for concurrent use:
// subscriptions apply messages while pickers read.
type Store struct {
	mu           sync.Mutex
	ranks        ranks
	streams      map[publisher]stream
	live         map[worker]rankRange
	decoder      *envelope.Decoder
	msg          envelope.Message
	load         ActiveLoad
	maxStaleness time.Duration
	count        func(envelope.Result)
	// gen moves on every SetLive that installs a new snapshot, which may
	// remove rank records; liveSnap is the snapshot installed last.
	gen      uint64
	liveSnap *discovery.Snapshot
}

// NewStore returns an empty store admitting no worker until SetLive.
// count receives every message's result; it may be nil.
func NewStore(count func(envelope.Result)) *Store {
	if count == nil {
		count = func(envelope.Result) {}
	}
	return &Store{
		ranks:        newRanks(),
		streams:      map[publisher]stream{},
		live:         map[worker]rankRange{},
		decoder:      envelope.NewDecoder(discovery.TopicLoad, MaxPayloadBytes),
		maxStaleness: DefaultMaxStaleness,
		count:        count,
	}
}

// SetMaxStaleness sets how old a sample may be and still count as fresh
// (dynamo.load.max_staleness; hot-reloadable).
func (s *Store) SetMaxStaleness(d time.Duration) {
	s.mu.Lock()
	s.maxStaleness = d
	s.mu.Unlock()
}

// MaxStaleness is the current freshness bound.
func (s *Store) MaxStaleness() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxStaleness
}

// SetLive installs the admission gate from a registry snapshot: only live
// workers' declared ranks are admitted. Samples, dispatches and stream
// state of anything that left are evicted at once. Installing the snapshot
// already installed is a no-op, so two followers of one registry may both
// call it.
func (s *Store) SetLive(snap *discovery.Snapshot) {
	s.mu.Lock()
	same := snap == s.liveSnap
	s.mu.Unlock()
	if same {
		return
	}
	live := make(map[worker]rankRange, len(snap.Workers))
	for _, w := range snap.Workers {
		live[worker{w.Namespace, w.InstanceID}] = rankRange{w.Runtime.DPStartRank, max(w.Runtime.DPSize, 1)}
	}
	pubs := make(map[publisher]bool, len(snap.Publishers))
	for _, p := range snap.Publishers {
		if p.Topic == discovery.TopicLoad {
			pubs[publisher{p.Namespace, p.PublisherID}] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if snap == s.liveSnap {
		return
	}
	s.gen++
	s.live, s.liveSnap = live, snap
	s.ranks.each(func(k Key, r *rank) {
		if !s.admitted(k) {
			s.ranks.remove(k, r)
		}
	})
	for p := range s.streams {
		if !pubs[p] {
			delete(s.streams, p)
		}
	}
}

func (s *Store) admitted(k Key) bool {
	r, ok := s.live[worker{k.Namespace, k.WorkerID}]
	return ok && k.DPRank >= r.start && uint64(k.DPRank) < uint64(r.start)+uint64(r.size)
}

// Connected starts a subscription's stream afresh and drops every sample
// held from its publisher: a change may have been missed meanwhile.
func (s *Store) Connected(ev events.LoadConnected) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := publisher{ev.Namespace, ev.PublisherID}
	s.streams[p] = stream{}
	s.dropPublisher(p)
}

func (s *Store) dropPublisher(p publisher) {
	for _, r := range s.ranks.byNS[p.namespace] {
		if r.hasSample && r.sample.PublisherID == p.id {
			r.hasSample = false
			s.ranks.samples--
		}
	}
}

// Apply decodes and applies one message, returning why it was applied or
// dropped. In steady state it allocates nothing.
func (s *Store) Apply(ev *events.LoadMessage) envelope.Result {
	s.mu.Lock()
	res := s.apply(ev)
	s.mu.Unlock()
	s.count(res)
	return res
}

func (s *Store) apply(ev *events.LoadMessage) envelope.Result {
	m := &s.msg
	if res := s.decoder.Decode(ev.Frames, m); res != envelope.Applied {
		return res
	}
	if m.PublisherID != ev.PublisherID {
		return envelope.IdentityMismatch
	}
	// Sequence order on this subscription's stream: replays are dropped; a
	// jump means missed messages, so what the publisher told us is stale.
	p := publisher{ev.Namespace, ev.PublisherID}
	st := s.streams[p]
	if st.seen && m.Sequence <= st.last {
		return envelope.Duplicate
	}
	if st.seen && m.Sequence > st.last+1 {
		s.dropPublisher(p)
	}
	s.streams[p] = stream{last: m.Sequence, seen: true}

	a := &s.load
	if !DecodeActiveLoad(m.Envelope.Payload, a) {
		return envelope.Malformed
	}
	k := Key{ev.Namespace, a.WorkerID, a.DPRank}
	if !s.admitted(k) {
		return envelope.IdentityMismatch
	}
	r := s.ranks.lookup(k)
	exists := r != nil && r.hasSample
	// The same publisher's older sequence is a replay; a new publisher (a
	// restarted worker process) replaces whatever was held.
	if exists && r.sample.PublisherID == m.PublisherID && m.Sequence <= r.sample.Sequence {
		return envelope.Duplicate
	}
	if !exists && s.ranks.samples >= MaxEntries {
		return envelope.OverCapacity
	}
	if r == nil {
		r = s.ranks.get(k)
	}
	if !r.hasSample {
		r.hasSample = true
		s.ranks.samples++
	}
	r.sample = Sample{ActiveLoad: *a, PublisherID: m.PublisherID, Sequence: m.Sequence, ReceivedAt: ev.At}
	s.ranks.answered(r)
	return envelope.Applied
}

// Latest returns the last sample of a rank, however old.
func (s *Store) Latest(k Key) (Sample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.ranks.lookup(k); r != nil && r.hasSample {
		return r.sample, true
	}
	return Sample{}, false
}

// Fresh returns the rank's sample if it is at most maxAge old at now.
func (s *Store) Fresh(k Key, maxAge time.Duration, now time.Time) (Sample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fresh(k, maxAge, now)
}

// FreshDefault is Fresh with the configured max staleness.
func (s *Store) FreshDefault(k Key, now time.Time) (Sample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fresh(k, s.maxStaleness, now)
}

func (s *Store) fresh(k Key, maxAge time.Duration, now time.Time) (Sample, bool) {
	r := s.ranks.lookup(k)
	if r == nil || !r.hasSample || now.Sub(r.sample.ReceivedAt) > maxAge {
		return Sample{}, false
	}
	return r.sample, true
}

// Len is the number of ranks with a sample.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ranks.samples
}

// Each calls f for every held sample (for metrics), under the store's lock:
// f must not call back into the store.
func (s *Store) Each(f func(Key, Sample)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ranks.each(func(k Key, r *rank) {
		if r.hasSample {
			f(k, r.sample)
		}
	})
}
