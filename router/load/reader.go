package load

import "time"

// Reader answers many questions about one instant under one hold of the
// store's lock, so a picker can score every candidate rank of a request
// consistently and cheaply: the time cut-offs are computed once. Close
// releases the lock; a Reader must not outlive its request.
type Reader struct {
	s *Store
	// A sample received after freshAfter is fresh; a dispatch made at or
	// before expireAt has aged out; one made at or before stallAt is old
	// enough to stall its rank.
	freshAfter, expireAt, stallAt time.Time
}

// Reader locks the store until Close and fixes the time of the questions.
func (s *Store) Reader(now time.Time) Reader {
	s.mu.Lock()
	return Reader{s: s, freshAfter: now.Add(-s.maxStaleness), expireAt: now.Add(-DispatchTTL), stallAt: now.Add(-StallAfter)}
}

// Close releases the store.
func (r *Reader) Close() { r.s.mu.Unlock() }

// Score is everything a picker needs about one rank for one phase.
type Score struct {
	Status
	// Tokens and Blocks were dispatched since the rank's last sample.
	Tokens, Blocks uint64
	// Stalled: a request of StallMinBlocks or more has gone unanswered for
	// StallAfter (not the decode half of a pair, not an ended request).
	Stalled bool
}

// Status classifies rank k for phase p (see StatusOf).
func (r *Reader) Status(k Key, p Phase) Status {
	rk := r.s.ranks.lookup(k)
	if rk == nil {
		return Status{Kind: Quiet}
	}
	return r.status(rk, p)
}

func (r *Reader) status(rk *rank, p Phase) Status {
	if !rk.hasSample {
		return Status{Kind: Quiet}
	}
	v := &rk.sample
	backlog, has := v.Backlog(p)
	switch {
	case !has:
		return Status{Kind: Undefined}
	case !v.ReceivedAt.Before(r.freshAfter):
		return Status{Kind: Fresh, Backlog: backlog}
	case backlog == 0:
		return Status{Kind: Quiet}
	}
	return Status{Kind: SilentUnderLoad}
}

// Dispatched returns the prompt tokens and blocks dispatched to rank k
// since its last sample (over the last DispatchTTL), and whether the rank
// may be stalled: a request of StallMinBlocks or more left unanswered for
// StallAfter, not counting the decode half of a pair or ended requests.
func (r *Reader) Dispatched(k Key) (tokens, blocks uint64, stalled bool) {
	rk := r.s.ranks.lookup(k)
	if rk == nil {
		return 0, 0, false
	}
	return r.dispatched(rk)
}

func (r *Reader) dispatched(d *rank) (tokens, blocks uint64, stalled bool) {
	r.s.ranks.expire(d, r.expireAt)
	// Records are in arrival order: only the prefix old enough can stall.
	for i := d.head; d.stallable > 0 && i < len(d.list) && !d.list[i].At.After(r.stallAt); i++ {
		if canStall(&d.list[i]) {
			stalled = true
			break
		}
	}
	return d.tokens, d.blocks, stalled
}

// RankRef is a handle to one rank's record, so a picker that scores the
// same candidates request after request skips the lookup. A handle stays
// valid while Generation is unchanged (SetLive may remove records).
type RankRef struct{ r *rank }

// Generation changes whenever records may have been removed.
func (r *Reader) Generation() uint64 { return r.s.gen }

// Ref returns rank k's handle, creating its record if the rank is
// admitted; a rank that is not admitted gets the zero handle, which
// scores as quiet.
func (r *Reader) Ref(k Key) RankRef {
	if !r.s.admitted(k) {
		return RankRef{}
	}
	return RankRef{r.s.ranks.get(k)}
}

// ScoreRef is Score through a handle.
func (r *Reader) ScoreRef(ref RankRef, p Phase) Score {
	if ref.r == nil {
		return Score{Status: Status{Kind: Quiet}}
	}
	sc := Score{Status: r.status(ref.r, p)}
	sc.Tokens, sc.Blocks, sc.Stalled = r.dispatched(ref.r)
	return sc
}
