package engine

import "time"

// scheduled is one request's share of a step.
type scheduled struct {
	s      *seq
	tokens int
}

// complete finishes the step in flight: every request whose computed
// tokens reach its target emits one token; finished ones free their blocks.
func (e *Engine) complete(out []Output) []Output {
	e.busy = false
	for _, b := range e.batch {
		s := b.s
		s.computed += b.tokens
		if s.computed < s.target() {
			continue // a non-final prefill chunk
		}
		s.generated++
		o := Output{RequestID: s.req.ID, NewTokens: 1, FirstToken: s.generated == 1}
		if o.FirstToken {
			o.CachedTokens = s.hit
		}
		if s.generated == s.maxTokens {
			o.Finished = true
			e.release(s)
			e.removeRunning(s)
		}
		out = append(out, o)
	}
	clear(e.batch) // drop the finished requests with the slice's backing array
	e.batch = e.batch[:0]
	return out
}

// plan forms the next batch at e.nextAt: running requests first (in
// admission order, preempting the newest when blocks run out), then FIFO
// admission while seats and token budget remain. An empty batch idles.
func (e *Engine) plan(out []Output) []Output {
	e.pending = false
	budget := e.cfg.MaxNumBatchedTokens
	st := &e.step
	*st = Step{Prefill: st.Prefill[:0], Decode: st.Decode[:0]}
	add := func(s *seq, n int) {
		e.batch = append(e.batch, scheduled{s, n})
		budget -= n
		if s.decoding() {
			st.Decode = append(st.Decode, s.computed)
			st.DecodeContext += s.computed
		} else {
			st.Prefill = append(st.Prefill, Chunk{NewTokens: n, Context: s.computed})
			st.PrefillTokens += n
		}
	}
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := min(s.target()-s.computed, budget)
		for !e.grow(s, n) {
			victim := e.running[len(e.running)-1]
			out = e.preempt(victim, out)
			if victim == s {
				break
			}
		}
		if i < len(e.running) && e.running[i] == s {
			add(s, n)
		}
	}
	for len(e.waiting) > 0 && len(e.running) < e.cfg.MaxNumSeqs && budget > 0 {
		s := e.waiting[0]
		n, ok := e.admit(s, budget)
		if !ok {
			break // head-of-line: FIFO order is kept even when later ones would fit
		}
		e.waiting = e.waiting[1:]
		e.running = append(e.running, s)
		add(s, n)
	}
	if len(e.batch) == 0 {
		return out
	}
	e.stats.Steps++
	e.stats.PrefillTokens += uint64(st.PrefillTokens)
	st.KVFraction = float64(e.pool.referenced()) / float64(e.cfg.TotalKVBlocks)
	d := e.timing.StepTime(*st)
	e.busy = true
	e.nextAt = e.nextAt.Add(time.Duration(float64(d) / e.cfg.SpeedupRatio))
	return out
}

// admit pins s's cached prompt prefix and reserves blocks for its first
// chunk, or changes nothing if the blocks are not there. At least one
// prompt token is always computed, so a fully cached prompt still yields
// logits for its first token.
func (e *Engine) admit(s *seq, budget int) (int, bool) {
	bs := e.cfg.BlockSize
	// s holds no blocks while waiting, so its cached slice is free to
	// reuse; it grows to the prompt's block count at most.
	hits := s.cached[:0]
	inLRU := 0
	for i, h := range s.hashes {
		if e.cfg.DisablePrefixCaching {
			break
		}
		b := e.pool.lookup(h)
		if b == 0 || (i+1)*bs >= s.target() {
			break
		}
		if hits == nil {
			hits = make([]int32, 0, len(s.hashes))
		}
		hits = append(hits, b)
		if e.pool.slab[b].refs == 0 {
			inLRU++
		}
	}
	hit := len(hits) * bs
	// Imported KV counts as computed, short of the token that must run.
	start := max(hit, min(s.imported, s.target()-1))
	n := min(s.target()-start, budget)
	if e.cfg.DisableChunkedPrefill && n < s.target()-start {
		return 0, false // the whole rest must fit in this step
	}
	need := e.blocksFor(start+n) - len(hits)
	if need > e.pool.available()-inLRU {
		return 0, false
	}
	for _, b := range hits {
		e.pool.ref(b)
	}
	s.cached, s.computed, s.imported = hits, start, 0
	if s.generated == 0 {
		s.hit = hit
	}
	e.stats.CachedTokens += uint64(hit)
	e.grow(s, n) // cannot fail: checked above
	return n, true
}

// grow reserves blocks so s can compute n more tokens, and registers the
// prompt blocks those tokens complete in the prefix cache.
func (e *Engine) grow(s *seq, n int) bool {
	need := e.blocksFor(s.computed+n) - s.held()
	if !e.pool.take(need) {
		return false
	}
	s.private += max(0, need)
	if !e.cfg.DisablePrefixCaching {
		e.store(s, s.computed+n)
	}
	return true
}

// store moves s's newly completed prompt blocks from private to cached,
// emitting Stored events chained by parent hash. A block another request
// cached meanwhile is shared instead, returning ours to the free pool.
func (e *Engine) store(s *seq, upto int) {
	bs := e.cfg.BlockSize
	last := min(len(s.hashes), upto/bs) // blocks complete at upto
	if len(s.cached) >= last {
		return // a decode step or a chunk inside a block: most calls
	}
	var run []StoredBlock
	var parent *uint64
	flush := func() {
		if run != nil {
			e.emit(KVEvent{Kind: Stored, ParentHash: parent, Blocks: run})
			run = nil
		}
	}
	if cap(s.cached) == 0 {
		s.cached = make([]int32, 0, len(s.hashes))
	}
	for i := len(s.cached); i < last; i++ {
		h := s.hashes[i]
		s.private--
		if b := e.pool.lookup(h); b != 0 {
			flush()
			e.pool.ref(b)
			e.pool.free++
			s.cached = append(s.cached, b)
			continue
		}
		if run == nil {
			parent = nil
			if i > 0 {
				p := s.hashes[i-1]
				parent = &p
			}
			run = make([]StoredBlock, 0, last-i)
		}
		s.cached = append(s.cached, e.pool.insert(h, s.tokens[i]))
		run = append(run, StoredBlock{BlockHash: h, TokensHash: s.tokens[i]})
	}
	flush()
}

// release unpins s's blocks. Deeper blocks are released first so LRU
// eviction takes chain tails before their parents.
func (e *Engine) release(s *seq) {
	for i := len(s.cached) - 1; i >= 0; i-- {
		e.pool.unref(s.cached[i])
	}
	e.pool.free += s.private
	s.cached, s.private = s.cached[:0], 0
}

// preempt drops s's KV and puts it at the front of the waiting queue; it
// keeps its generated count and recomputes prompt + generated later.
func (e *Engine) preempt(s *seq, out []Output) []Output {
	e.release(s)
	s.computed = 0
	e.removeRunning(s)
	e.waiting = append([]*seq{s}, e.waiting...)
	e.stats.Preemptions++
	return append(out, Output{RequestID: s.req.ID, Preempted: true})
}

func (e *Engine) removeRunning(s *seq) {
	for i, r := range e.running {
		if r == s {
			e.running = append(e.running[:i], e.running[i+1:]...)
			return
		}
	}
}
