package picker

import (
	"sync"

	"switchyard/router/active"
	"switchyard/router/discovery"
	"switchyard/router/load"
)

// Scheduler is the one Picker: it gathers a request's candidate ranks
// under the shared rules (candidates.go) and lets its policy choose a rank
// per phase. It only reads the load store: the routing core records what
// a selection pinned (Dispatch). Policies (load, round_robin, random, kv, least_kv_blocks; see
// names.go) differ only in how a phase's rank is chosen, so they compare on
// equal terms.
type Scheduler struct {
	store  *load.Store
	count  func(role, reason string)
	policy policy
	// The policy's optional steps, resolved once at construction.
	preparer preparer
	bypasser bypasser
	reporter reporter
	// active is the core's account of the requests it dispatched, read
	// when opts.Track (or forceTrack) says so; nil reads nothing.
	active     *active.Set
	opts       KVOptions
	forceTrack bool

	mu      sync.Mutex
	cursors [2]uint64 // per phase
	// reader answers load questions during a pick; a field rather than a
	// local so that handing it to a policy allocates nothing.
	reader load.Reader
	// Candidates cached across picks, so a pick allocates nothing.
	pools pools
	tied  []int
	// lastNS is the namespace of the last pick and lastPrefill whether it
	// scored prefill candidates there, for Candidates.
	lastNS      string
	lastPrefill bool
}

// newScheduler returns a picker over store that chooses with pol. count
// receives each selection's role (prefill, decode) and reason; it may be
// nil.
func newScheduler(store *load.Store, count func(role, reason string), pol policy) *Scheduler {
	if count == nil {
		count = func(string, string) {}
	}
	s := &Scheduler{store: store, count: count, policy: pol}
	s.preparer, _ = pol.(preparer)
	s.bypasser, _ = pol.(bypasser)
	s.reporter, _ = pol.(reporter)
	return s
}

// NewLoad returns the picker that mirrors Dynamo's load-only cost
// formulas (loadPolicy).
func NewLoad(store *load.Store, count func(role, reason string)) *Scheduler {
	return newScheduler(store, count, loadPolicy{})
}

// NewRoundRobin returns a picker that ignores load: each phase rotates a
// cursor over its candidate ranks. It keeps the same candidate rules and
// dispatch accounting as the load picker, so the two compare on equal
// terms.
func NewRoundRobin(store *load.Store, count func(role, reason string)) *Scheduler {
	return newScheduler(store, count, roundRobinPolicy{})
}

// NewRandom returns a picker that draws each phase's rank uniformly from a
// PCG seeded with seed, so a simulated run stays reproducible.
func NewRandom(store *load.Store, seed uint64, count func(role, reason string)) *Scheduler {
	return newScheduler(store, count, newRandomPolicy(seed))
}

// candidate is one worker rank.
type candidate struct {
	w    *discovery.Worker
	rank uint32
	// cost is defined when ok.
	cost    float64
	ok      bool
	fresh   bool
	stalled bool
	ref     load.RankRef
}

func (c *candidate) key() load.Key {
	return load.Key{Namespace: c.w.Namespace, WorkerID: c.w.InstanceID, DPRank: c.rank}
}

func (c *candidate) pin() Pin {
	return Pin{WorkerID: c.w.InstanceID, DPRank: c.rank, DPDeclared: c.w.Runtime.DPDeclared, Role: c.w.Role}
}

// Pick implements Picker.
func (s *Scheduler) Pick(req Request, snap *discovery.Snapshot) (Selection, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pools.fillCached(req, snap)
	if len(s.pools.decode) == 0 {
		return Selection{}, false
	}
	s.reader = s.store.Reader(req.Now)
	s.pools.resolve(&s.reader)
	sel := s.selectLocked(req)
	s.reader.Close()
	s.count("decode", sel.DecodeReason)
	s.count("prefill", sel.PrefillReason)
	return sel, true
}

// selectLocked has the policy choose the decode rank across every
// eligible namespace, then the prefill rank within the winner's namespace,
// beside a decode worker only, unless the policy lets the decode worker
// prefill the request itself.
func (s *Scheduler) selectLocked(req Request) (sel Selection) {
	if s.preparer != nil {
		s.preparer.prepare(req, &s.pools)
	}
	cands := s.pools.decode
	di, reason := s.policy.choose(s, load.Decode, cands, req)
	winner := &cands[di]
	s.lastNS, s.lastPrefill = winner.w.Namespace, false
	sel = Selection{Namespace: winner.w.Namespace, Decode: winner.pin(), DecodeReason: reason, PrefillReason: ReasonNoPrefillPool,
		PromptBlocks: ceilDiv(req.PromptTokens, uint64(max(winner.w.BlockSize, 1))), BlockSize: uint64(winner.w.BlockSize)}
	if winner.w.Role != discovery.RoleDecode {
		s.report(winner)
		sel.CachedTokens = s.cachedTokens(winner, req)
		return sel
	}
	pcands := s.pools.prefill[sel.Namespace]
	if len(pcands) == 0 {
		s.report(winner)
		sel.CachedTokens = s.cachedTokens(winner, req)
		return sel
	}
	if s.bypasser != nil && s.bypasser.bypass(s, winner, req) {
		sel.DecodeReason, sel.PrefillReason, sel.Bypass = ReasonConditionalBypass, ReasonConditionalBypass, true
		sel.CachedTokens = s.cachedTokens(winner, req)
		return sel
	}
	pi, reason := s.policy.choose(s, load.Prefill, pcands, req)
	sel.Prefill, sel.HasPrefill, sel.PrefillReason = pcands[pi].pin(), true, reason
	s.lastPrefill = true
	s.report(&pcands[pi])
	sel.CachedTokens = s.cachedTokens(&pcands[pi], req)
	return sel
}

// cachedTokens is the prompt prefix the rank that prefills the request
// holds in its cache, by the KV index; 0 for a policy without one.
func (s *Scheduler) cachedTokens(c *candidate, req Request) uint64 {
	k, ok := s.policy.(*kvPolicy)
	if !ok {
		return 0
	}
	return min(uint64(k.overlapOf(c))*uint64(max(c.w.BlockSize, 1)), req.PromptTokens)
}

// report tells a reporting policy which rank answered for the request.
func (s *Scheduler) report(c *candidate) {
	if s.reporter != nil {
		s.reporter.chosen(c)
	}
}

var _ Picker = (*Scheduler)(nil)

// Candidates implements Explainer: the decode candidates of the last pick
// and the prefill candidates of its namespace, each with its cost when the
// policy defined one.
func (s *Scheduler) Candidates(dst []Candidate) []Candidate {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.pools.decode {
		dst = append(dst, s.pools.decode[i].candidate("decode"))
	}
	if s.lastPrefill {
		for i, cs := 0, s.pools.prefill[s.lastNS]; i < len(cs); i++ {
			dst = append(dst, cs[i].candidate("prefill"))
		}
	}
	return dst
}

func (c *candidate) candidate(phase string) Candidate {
	return Candidate{Phase: phase, WorkerID: c.w.InstanceID, DPRank: c.rank, Cost: c.cost, Defined: c.ok}
}
