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
	// finished: served to its end; it holds a slot and nothing else.
	finished bool
}

// rank is everything the store keeps about one worker rank: its latest
// sample and its unanswered dispatches in arrival order, with running sums
// so a backlog query costs nothing per record. One map lookup answers every
// question a picker asks about a rank.
type rank struct {
	sample    Sample
	hasSample bool

	list           []Dispatch // list[head:] are live
	head           int
	tokens, blocks uint64
	// stallable counts live records that could stall the rank, so ranks
	// without any (paired decodes, small requests) are never scanned.
	stallable int
	// records counts the live unfinished records of each request, so
	// ending one looks only as far back as its records go: a saturated
	// rank holds thousands, and a request ends soon after it is
	// dispatched. Finished records need no more settling, so the map
	// holds about the requests in flight, not every record a quiet
	// publisher leaves until its next sample.
	records map[uint64]int
	// finished counts live records of requests served to their end: they
	// add nothing to the backlog, so they are compacted away when the rank
	// runs out of room.
	finished int
}

func canStall(dp *Dispatch) bool {
	return !dp.ended && !dp.PairedDecode && dp.Blocks >= StallMinBlocks
}

func (r *rank) live() []Dispatch { return r.list[r.head:] }

// rankKey is a rank within one namespace: integers only, so the lookups a
// picker makes per candidate hash no string.
type rankKey struct {
	worker uint64
	rank   uint32
}

type ranks struct {
	// byNS holds every rank, by namespace first.
	byNS map[string]map[rankKey]*rank
	// samples counts ranks with a sample; total counts live dispatch records.
	samples   int
	total     int
	lastSweep time.Time
}

func newRanks() ranks { return ranks{byNS: map[string]map[rankKey]*rank{}} }

func (d *ranks) lookup(k Key) *rank { return d.byNS[k.Namespace][rankKey{k.WorkerID, k.DPRank}] }

// get returns rank k, creating it.
func (d *ranks) get(k Key) *rank {
	ns := d.byNS[k.Namespace]
	if ns == nil {
		ns = map[rankKey]*rank{}
		d.byNS[k.Namespace] = ns
	}
	rk := rankKey{k.WorkerID, k.DPRank}
	r := ns[rk]
	if r == nil {
		r = &rank{}
		ns[rk] = r
	}
	return r
}

// each visits every rank; f may remove the rank it is given.
func (d *ranks) each(f func(Key, *rank)) {
	for ns, m := range d.byNS {
		for rk, r := range m {
			f(Key{ns, rk.worker, rk.rank}, r)
		}
	}
}

// answered clears a rank's dispatches: its sample now accounts for them.
func (d *ranks) answered(r *rank) {
	if len(r.live()) > 0 {
		d.total -= len(r.live())
		r.list, r.head, r.tokens, r.blocks, r.stallable, r.finished = r.list[:0], 0, 0, 0, 0, 0 // keep the capacity for the next burst
		clear(r.records)
	}
}

// expire drops a rank's dispatches that arrived before cutoff (now minus
// the TTL); they are in arrival order, so only the front is examined.
func (d *ranks) expire(r *rank, cutoff time.Time) {
	for r.head < len(r.list) && !r.list[r.head].At.After(cutoff) {
		r.tokens -= r.list[r.head].PromptTokens
		r.blocks -= r.list[r.head].Blocks
		if canStall(&r.list[r.head]) {
			r.stallable--
		}
		if r.list[r.head].finished {
			r.finished--
		} else {
			r.forget(r.list[r.head].RequestID)
		}
		r.head++
		d.total--
	}
	if r.head == len(r.list) {
		r.list, r.head = r.list[:0], 0
	} else if r.head > 64 && r.head > len(r.list)/2 {
		n := copy(r.list, r.list[r.head:]) // compact now and then, not on every expiry
		r.list, r.head = r.list[:n], 0
	}
}

func (d *ranks) remove(k Key, r *rank) {
	d.total -= len(r.live())
	if r.hasSample {
		d.samples--
	}
	m := d.byNS[k.Namespace]
	delete(m, rankKey{k.WorkerID, k.DPRank})
	if len(m) == 0 {
		delete(d.byNS, k.Namespace)
	}
}

// compactAt is the share of a full rank's records that must be finished
// before the rank is compacted: each compaction moves the live records
// once, so freeing at least an eighth of them keeps it cheap per dispatch.
const compactAt = MaxDispatchesPerRank / 8

// compact drops a rank's finished records, keeping the others in order.
func (d *ranks) compact(r *rank) {
	kept := r.list[:0]
	for _, dp := range r.live() {
		if dp.finished {
			d.total--
			continue
		}
		kept = append(kept, dp)
	}
	r.list, r.head, r.finished = kept, 0, 0
}

// forget uncounts one live unfinished record of the request.
func (r *rank) forget(id uint64) {
	if n := r.records[id]; n > 1 {
		r.records[id] = n - 1
	} else {
		delete(r.records, id)
	}
}

func (d *ranks) add(r *rank, dp Dispatch) {
	r.list = append(r.list, dp)
	if r.records == nil {
		r.records = map[uint64]int{}
	}
	r.records[dp.RequestID]++
	if canStall(&dp) {
		r.stallable++
	}
	r.tokens += dp.PromptTokens
	r.blocks += dp.Blocks
	d.total++
}

// RecordDispatch counts a request pinned to a rank. It reports false when
// the bounds refuse it (the request is still served; only its backlog
// estimate is lost).
func (s *Store) RecordDispatch(dp Dispatch) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.admitted(dp.Key) {
		return false
	}
	d := &s.ranks
	cutoff := dp.At.Add(-DispatchTTL)
	r := d.get(dp.Key)
	d.expire(r, cutoff)
	// At the ceiling, sweep every rank for expired records, at most once a
	// second so a saturated store does not pay a full sweep per request.
	if d.total >= MaxDispatches && dp.At.Sub(d.lastSweep) >= time.Second {
		d.lastSweep = dp.At
		d.each(func(_ Key, other *rank) {
			d.expire(other, cutoff)
			if other.finished > 0 {
				d.compact(other)
			}
		})
	}
	// A request served between two samples of a quiet publisher leaves a
	// finished record until the next one: without compaction, such records
	// would fill the rank and refuse every later dispatch.
	if len(r.live()) >= MaxDispatchesPerRank && r.finished >= compactAt {
		d.compact(r)
	}
	if d.total >= MaxDispatches || len(r.live()) >= MaxDispatchesPerRank {
		return false
	}
	dp.ended, dp.finished = false, false
	d.add(r, dp)
	return true
}

// EndDispatch marks a request ended (refused, failed, cancelled) on every
// rank it was pinned to. An ended request no longer makes a rank stalled,
// but it still counts toward the backlog until the next sample: a
// cancelled request may still be running in the engine.
func (s *Store) EndDispatch(requestID uint64, keys ...Key) {
	s.settle(requestID, false, keys)
}

// FinishDispatch drops a request that was served to its end from every
// rank it was pinned to: the engine is done with it, so no backlog can
// hold it any more. Without this, a request that starts and finishes
// between two of a rank's samples (change-driven publishers send nothing
// when the load is back where it was) would count for DispatchTTL.
func (s *Store) FinishDispatch(requestID uint64, keys ...Key) {
	s.settle(requestID, true, keys)
}

// settle ends requestID's live records on the ranks keys, and with drop
// takes their tokens and blocks out of the ranks' sums.
func (s *Store) settle(requestID uint64, drop bool, keys []Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		r := s.ranks.lookup(k)
		if r == nil {
			continue
		}
		l := r.live()
		// Newest first, until every unfinished record of the request was
		// seen; finished ones are settled for good.
		for i, left := len(l)-1, r.records[requestID]; i >= 0 && left > 0; i-- {
			dp := &l[i]
			if dp.RequestID != requestID || dp.finished {
				continue
			}
			left--
			if canStall(dp) {
				r.stallable--
			}
			dp.ended = true
			if drop {
				dp.finished = true
				r.finished++
				r.forget(requestID)
				r.tokens -= dp.PromptTokens
				r.blocks -= dp.Blocks
				dp.PromptTokens, dp.Blocks = 0, 0
			}
		}
	}
}

// Unanswered sums the prompt tokens and blocks dispatched to a rank since
// its last sample, over the last DispatchTTL.
func (s *Store) Unanswered(k Key, now time.Time) (tokens, blocks uint64) {
	r := s.Reader(now)
	defer r.Close()
	tokens, blocks, _ = r.Dispatched(k)
	return tokens, blocks
}

// Stalled reports a rank that has left a request of StallMinBlocks or more
// unanswered for StallAfter. The decode half of a pair and ended requests
// do not count. Pickers ignore stalls when no rank has a fresh sample.
func (s *Store) Stalled(k Key, now time.Time) bool {
	r := s.Reader(now)
	defer r.Close()
	_, _, stalled := r.Dispatched(k)
	return stalled
}
