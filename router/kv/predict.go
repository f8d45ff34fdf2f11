package kv

import "time"

// Predicted cache state. When workers publish no kv-events (or the router
// is told not to follow them: dynamo.kv.use_kv_events false), the router
// infers what each rank caches from its own picks: the rank that prefills
// a request holds the prompt's blocks for a while afterwards. Each
// predicted block expires a fixed time after the last pick that predicted
// it, the way an engine's cache evicts what nobody reuses.
//
// Predictions change the same index kv-events feed, so the picker scores
// them exactly like observed blocks. Expiry is driven by the picks' own
// times (ExpirePredicted before each match), so a replay of the recorded
// picks predicts and expires exactly what the live router did.

// DefaultPredictedTTL is how long a predicted block stays without being
// predicted again (Dynamo's approximate indexer keeps its blocks 120 s).
const DefaultPredictedTTL = 120 * time.Second

// MaxPredictions caps the expiry records held; a prediction past it is
// refused (the pick itself is unaffected).
const MaxPredictions = 1 << 20

// PredictingResult is the result of a kv-events message ignored because
// the tracker predicts cache state from picks instead.
const PredictingResult = "predicting"

type predictedBlock struct {
	rank Rank
	hash uint64 // the block's sequence hash: its engine block hash here
}

type predictedExpiry struct {
	at    time.Time
	block predictedBlock
}

// predictor holds when each predicted block expires. queue is in
// prediction order, which with one TTL is expiry order; a block predicted
// again gets a later entry, and its earlier ones are skipped when they
// come due (expires names the one that counts).
type predictor struct {
	ttl     time.Duration
	queue   []predictedExpiry // queue[head:] are pending
	head    int
	expires map[predictedBlock]time.Time
	seq     []uint64 // scratch sequence hashes
	ev      Event    // scratch event
}

// SetPredicting switches between following kv-events (on false) and
// predicting cache state from picks (on true) with blocks kept for ttl
// (DefaultPredictedTTL when 0). A switch of mode clears every rank's
// blocks: what one mode built, the other would never remove. Changing
// only the TTL keeps what is held; it applies to later predictions.
func (t *Tracker) SetPredicting(on bool, ttl time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ttl <= 0 {
		ttl = DefaultPredictedTTL
	}
	if on == (t.pred != nil) {
		if on {
			t.pred.ttl = ttl
		}
		return
	}
	t.index.ClearAll()
	clear(t.seen)
	clear(t.vllmSeq)
	t.pred = nil
	if on {
		t.pred = &predictor{ttl: ttl, expires: map[predictedBlock]time.Time{}}
	}
}

// Predicting reports whether the tracker predicts cache state from picks.
func (t *Tracker) Predicting() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pred != nil
}

// Predict records that rank r holds the prompt's blocks (local block
// hashes, as the picker hashed them for r's block size) from at. It does
// nothing unless the tracker is predicting, and reports the index's
// result (OverCapacity also when the expiry records are full).
func (t *Tracker) Predict(r Rank, local []uint64, at time.Time) Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pred
	if p == nil || len(local) == 0 {
		return Applied
	}
	if len(p.queue)-p.head+len(local) > MaxPredictions {
		return OverCapacity
	}
	p.seq = appendSequenceHashes(p.seq[:0], local)
	p.ev = Event{WorkerID: r.WorkerID, DPRank: r.DPRank, Tier: TierDevice, Kind: Stored, Blocks: p.ev.Blocks[:0]}
	for i, h := range local {
		p.ev.Blocks = append(p.ev.Blocks, StoredBlock{BlockHash: p.seq[i], TokensHash: h})
	}
	res := t.index.Apply(r.Namespace, &p.ev)
	if res != Applied && res != OverCapacity {
		return res
	}
	expiry := at.Add(p.ttl)
	for _, h := range p.seq {
		b := predictedBlock{rank: r, hash: h}
		p.expires[b] = expiry
		p.queue = append(p.queue, predictedExpiry{at: expiry, block: b})
	}
	return res
}

// ExpirePredicted removes the predicted blocks whose time is up at now and
// reports how many it removed.
func (t *Tracker) ExpirePredicted(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pred
	if p == nil {
		return 0
	}
	removed := 0
	for p.head < len(p.queue) && !p.queue[p.head].at.After(now) {
		e := p.queue[p.head]
		p.head++
		if latest, ok := p.expires[e.block]; !ok || latest.After(e.at) {
			continue // predicted again since: a later entry counts
		}
		delete(p.expires, e.block)
		p.ev = Event{WorkerID: e.block.rank.WorkerID, DPRank: e.block.rank.DPRank, Tier: TierDevice, Kind: Removed,
			Removed: append(p.ev.Removed[:0], e.block.hash)}
		if t.index.Apply(e.block.rank.Namespace, &p.ev) == Applied {
			removed++
		}
	}
	p.compact()
	return removed
}

// compact drops the consumed front of the queue now and then, so its
// memory follows what is pending.
func (p *predictor) compact() {
	switch {
	case p.head == len(p.queue):
		p.queue, p.head = p.queue[:0], 0
	case p.head > 1024 && p.head > len(p.queue)/2:
		n := copy(p.queue, p.queue[p.head:])
		p.queue, p.head = p.queue[:n], 0
	}
}

// PredictedBlocks reports how many predicted blocks are held.
func (t *Tracker) PredictedBlocks() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pred == nil {
		return 0
	}
	return len(t.pred.expires)
}
