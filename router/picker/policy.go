package picker

import (
	"math/rand/v2"

	"switchyard/router/load"
)

// policy is how a phase's rank is chosen among the candidates the
// Scheduler gathered. choose returns the chosen index into cands and the
// selection reason; it may set each candidate's cost and ok (what a
// recording shows as the candidate's defined cost), and reads load through
// s.reader, which holds the store for the pick. cands is never empty.
//
// A policy that needs more than a choice per phase implements the optional
// steps below; the Scheduler calls them in this order: prepare, choose
// (decode), bypass, choose (prefill), chosen.
type policy interface {
	choose(s *Scheduler, phase load.Phase, cands []candidate, req Request) (int, string)
}

// preparer is called once per pick, before any choice, with the request's
// candidate pools.
type preparer interface {
	prepare(req Request, pools *pools)
}

// bypasser may let the chosen decode worker prefill the request itself
// (no prefill pin); it is asked only when prefill ranks stand beside it.
type bypasser interface {
	bypass(s *Scheduler, decode *candidate, req Request) bool
}

// reporter hears which rank answered for the request's prefill: the
// prefill pin, else the decode pin (not called on a bypass).
type reporter interface {
	chosen(c *candidate)
}

// loadPolicy mirrors Dynamo's load-only cost formulas:
//
//	prefill cost = (active_prefill_tokens + unanswered prompt tokens) / max_num_batched_tokens
//	decode cost  = (active_decode_blocks (else kv_used_blocks) + unanswered blocks
//	                + ceil(prompt tokens / block_size)) / total_kv_blocks
//
// over one candidate per dp_rank, under the best-effort contract of the
// load store: a fresh sample gives the backlog, a quiet rank has none, and
// any other rank has no defined cost. Equal costs rotate on a per-phase
// cursor; with no fresh sample anywhere the cursor rotates over all ranks.
type loadPolicy struct{}

func (loadPolicy) choose(s *Scheduler, phase load.Phase, cands []candidate, req Request) (int, string) {
	anyFresh, anyCapacity := false, false
	for i := range cands {
		c := &cands[i]
		c.ok, c.fresh, c.stalled = false, false, false
		capacity, perBlock := capacityOf(c.w, phase)
		if capacity == 0 {
			continue
		}
		anyCapacity = true
		sc := s.reader.ScoreRef(c.ref, phase)
		if c.admit(sc) {
			anyFresh = true
		}
		if !c.ok {
			continue // silent under load, or no such field: no defined cost
		}
		c.cost = s.loadCost(c, phase, sc, req, capacity, perBlock)
	}
	switch {
	case !anyCapacity:
		return s.rotateAll(phase, len(cands)), ReasonRoundRobin
	case !anyFresh && s.tracksLoad():
		// No sample is fresh, but the core's account costs every rank.
		for i := range cands {
			c := &cands[i]
			if capacity, perBlock := capacityOf(c.w, phase); capacity > 0 {
				c.cost, c.ok = s.loadCost(c, phase, load.Score{}, req, capacity, perBlock), true
			}
		}
		i, _, _ := s.lowestCost(phase, cands)
		return i, ReasonLoad
	case !anyFresh:
		return s.rotateAll(phase, len(cands)), ReasonRoundRobinStale
	}
	if !sitOutStalled(cands) {
		// Every costed rank may be stalled: nothing better to do than
		// rotate, and no cost decided.
		undefine(cands)
		return s.rotateAll(phase, len(cands)), ReasonRoundRobinStale
	}
	i, _, _ := s.lowestCost(phase, cands)
	return i, ReasonLoad
}

// loadCost is c's load-only cost for the phase. With tracking on, the
// core's account replaces the sampled backlog and the dispatches since
// (Tracking), and a rank that prefills its own requests (aggregated, or
// decode without a prefill pool) adds its prefill backlog to its decode
// cost in blocks, (tracked prefill tokens + prompt tokens) / block_size,
// as Dynamo's worker_logit does with no overlap credit: memory alone does
// not show the prompts queued ahead.
func (s *Scheduler) loadCost(c *candidate, phase load.Phase, sc load.Score, req Request, capacity, perBlock uint64) float64 {
	var backlog uint64
	if c.fresh {
		backlog = sc.Backlog
	}
	if phase == load.Prefill {
		backlog += sc.Tokens
	} else {
		backlog += sc.Blocks
	}
	if s.active == nil || !s.trackingLocked().Any() && s.opts.DecodeActiveRequestWeight == 0 {
		if phase == load.Decode {
			backlog += ceilDiv(req.PromptTokens, perBlock)
		}
		return float64(backlog) / float64(capacity)
	}
	if phase == load.Prefill {
		tokens, _ := s.withTracked(c, float64(backlog), 0)
		return tokens / float64(capacity)
	}
	tokens, blocks := s.withTracked(c, 0, float64(backlog))
	blocks += float64(ceilDiv(req.PromptTokens, perBlock))
	if s.trackingLocked().PrefillTokens && s.prefillsItself(c) {
		blocks += (tokens + float64(req.PromptTokens)) / float64(perBlock)
	}
	return blocks / float64(capacity)
}

// roundRobinPolicy ignores load: each phase rotates its cursor over its
// candidate ranks.
type roundRobinPolicy struct{}

func (roundRobinPolicy) choose(s *Scheduler, phase load.Phase, cands []candidate, _ Request) (int, string) {
	undefine(cands)
	return s.rotateAll(phase, len(cands)), ReasonRoundRobin
}

// randomPolicy draws each phase's rank uniformly from a seeded PCG.
type randomPolicy struct{ rng *rand.Rand }

func newRandomPolicy(seed uint64) randomPolicy {
	return randomPolicy{rng: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))}
}

func (p randomPolicy) choose(_ *Scheduler, _ load.Phase, cands []candidate, _ Request) (int, string) {
	undefine(cands)
	return p.rng.IntN(len(cands)), ReasonRandom
}
