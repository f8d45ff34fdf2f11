package load

import "time"

// Dispatch accounting: the router counts what it pinned to each rank since
// that rank's last sample, so a burst between two samples (or a rank whose
// publisher never speaks) fills up to its peers' load instead of taking
// every request.
const (
	// DispatchTTL is how long an unanswered dispatch counts.
	DispatchTTL = 30 * time.Second
	// StallAfter is how long a dispatch of StallMinBlocks or more may go
	// unanswered before its rank is considered possibly stalled.
	StallAfter     = 5 * time.Second
	StallMinBlocks = 2
	// MaxDispatches bounds the records held across all ranks, and
	// MaxDispatchesPerRank those of one rank.
	MaxDispatches        = 65536
	MaxDispatchesPerRank = 4096
)

// Dispatch is one request pinned to a rank.
type Dispatch struct {
	RequestID uint64
	Key       Key
	Phase     Phase
	// PromptTokens counts toward a prefill backlog, Blocks toward a decode one.
	PromptTokens uint64
	Blocks       uint64
	// PairedDecode marks the decode half of a prefill/decode pair: that rank
	// receives the request only after prefill finishes, so it cannot stall on it.
	PairedDecode bool
	At           time.Time
	// ended: refused, failed or cancelled; it may never have reached the engine.
	ended bool
}

type dispatches struct {
	byKey map[Key][]Dispatch
	total int
}

func newDispatches() dispatches { return dispatches{byKey: map[Key][]Dispatch{}} }

// answered clears a rank's dispatches: its sample now accounts for them.
func (d *dispatches) answered(k Key) {
	if l, ok := d.byKey[k]; ok {
		d.total -= len(l)
		delete(d.byKey, k)
	}
}

// expire drops a rank's dispatches older than the TTL (they are in order).
func (d *dispatches) expire(k Key, now time.Time) []Dispatch {
	l := d.byKey[k]
	i := 0
	for i < len(l) && now.Sub(l[i].At) >= DispatchTTL {
		i++
	}
	if i > 0 {
		d.total -= i
		l = l[i:]
		if len(l) == 0 {
			delete(d.byKey, k)
		} else {
			d.byKey[k] = l
		}
	}
	return l
}

func (d *dispatches) retain(keep func(Key) bool) {
	for k, l := range d.byKey {
		if !keep(k) {
			d.total -= len(l)
			delete(d.byKey, k)
		}
	}
}

// RecordDispatch counts a request pinned to a rank. It reports false when
// the bounds refuse it (the request is still served; only its backlog
// estimate is lost).
func (s *Store) RecordDispatch(dp Dispatch) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := &s.dispatches
	l := d.expire(dp.Key, dp.At)
	if d.total >= MaxDispatches {
		for k := range d.byKey {
			d.expire(k, dp.At)
		}
		l = d.byKey[dp.Key]
	}
	if d.total >= MaxDispatches || len(l) >= MaxDispatchesPerRank {
		return false
	}
	dp.ended = false
	d.byKey[dp.Key] = append(l, dp)
	d.total++
	return true
}

// EndDispatch marks a request ended (refused, failed, cancelled) on every
// rank it was pinned to. An ended request no longer makes a rank stalled.
func (s *Store) EndDispatch(requestID uint64, keys ...Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		l := s.dispatches.byKey[k]
		for i := range l {
			if l[i].RequestID == requestID {
				l[i].ended = true
			}
		}
	}
}

// Unanswered sums the prompt tokens and blocks dispatched to a rank since
// its last sample, over the last DispatchTTL.
func (s *Store) Unanswered(k Key, now time.Time) (tokens, blocks uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, dp := range s.dispatches.expire(k, now) {
		tokens += dp.PromptTokens
		blocks += dp.Blocks
	}
	return tokens, blocks
}

// Stalled reports a rank that has left a request of StallMinBlocks or more
// unanswered for StallAfter. The decode half of a pair and ended requests
// do not count. Pickers ignore stalls when no rank has a fresh sample.
func (s *Store) Stalled(k Key, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, dp := range s.dispatches.expire(k, now) {
		if !dp.ended && !dp.PairedDecode && dp.Blocks >= StallMinBlocks && now.Sub(dp.At) >= StallAfter {
			return true
		}
	}
	return false
}
