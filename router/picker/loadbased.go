package picker

import (
	"math/rand/v2"
	"slices"
	"sync"

	"switchyard/router/discovery"
	"switchyard/router/load"
)

// LoadBased mirrors Dynamo's load-only cost formulas:
//
//	prefill cost = (active_prefill_tokens + unanswered prompt tokens) / max_num_batched_tokens
//	decode cost  = (active_decode_blocks (else kv_used_blocks) + unanswered blocks
//	                + ceil(prompt tokens / block_size)) / total_kv_blocks
//
// over one candidate per dp_rank, under the best-effort contract of the
// load store: a fresh sample gives the backlog, a quiet rank has none, and
// any other rank has no defined cost. Equal costs rotate on a per-phase
// cursor; with no fresh sample anywhere the cursor rotates over all ranks.
type LoadBased struct {
	store  *load.Store
	count  func(role, reason string)
	policy policy
	rng    *rand.Rand // policyRandom only
	kv     *kvPolicy  // policyKV only

	mu      sync.Mutex
	cursors [2]uint64 // per phase
	// Candidates cached across picks, so a pick allocates nothing.
	pools pools
	tied  []int
	// lastNS is the namespace of the last pick and lastPrefill whether it
	// scored prefill candidates there, for Candidates.
	lastNS      string
	lastPrefill bool
}

// policy is how a phase's rank is chosen among the candidates.
type policy uint8

const (
	policyLoad policy = iota
	policyRoundRobin
	policyRandom
	policyKV
)

// NewLoadBased returns a load-based picker over store. count receives each
// selection's role (prefill, decode) and reason; it may be nil.
func NewLoadBased(store *load.Store, count func(role, reason string)) *LoadBased {
	if count == nil {
		count = func(string, string) {}
	}
	return &LoadBased{store: store, count: count}
}

// NewRoundRobin returns a picker that ignores load: each phase rotates a
// cursor over its candidate ranks. It keeps the same candidate rules and
// dispatch accounting as the load-based picker, so the two compare on
// equal terms.
func NewRoundRobin(store *load.Store, count func(role, reason string)) *LoadBased {
	p := NewLoadBased(store, count)
	p.policy = policyRoundRobin
	return p
}

// NewRandom returns a picker that draws each phase's rank uniformly from a
// PCG seeded with seed, so a simulated run stays reproducible.
func NewRandom(store *load.Store, seed uint64, count func(role, reason string)) *LoadBased {
	p := NewLoadBased(store, count)
	p.policy, p.rng = policyRandom, rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	return p
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
func (p *LoadBased) Pick(req Request, snap *discovery.Snapshot) (Selection, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pools.fillCached(req, snap)
	if len(p.pools.decode) == 0 {
		return Selection{}, false
	}
	r := p.store.Reader(req.Now)
	p.pools.resolve(&r)
	sel, decodeKey, prefillKey, blocks := p.selectLocked(&r, req)
	r.Close()
	p.count("decode", sel.DecodeReason)
	p.count("prefill", sel.PrefillReason)

	// Count what was pinned until the ranks' next samples answer for it.
	if sel.HasPrefill {
		p.store.RecordDispatch(load.Dispatch{RequestID: req.ID, Key: prefillKey, Phase: load.Prefill,
			PromptTokens: req.PromptTokens, Blocks: blocks, At: req.Now})
		p.store.RecordDispatch(load.Dispatch{RequestID: req.ID, Key: decodeKey, Phase: load.Decode,
			Blocks: blocks, PairedDecode: true, At: req.Now})
	} else {
		p.store.RecordDispatch(load.Dispatch{RequestID: req.ID, Key: decodeKey, Phase: load.Decode,
			PromptTokens: req.PromptTokens, Blocks: blocks, At: req.Now})
	}
	return sel, true
}

// selectLocked chooses the decode rank across every eligible namespace,
// then the prefill rank within the winner's namespace, beside a decode
// worker only.
func (p *LoadBased) selectLocked(r *load.Reader, req Request) (sel Selection, decodeKey, prefillKey load.Key, blocks uint64) {
	if p.policy == policyKV {
		return p.selectKV(r, req)
	}
	cands := p.pools.decode
	di, reason := p.choose(r, load.Decode, cands, req)
	winner := cands[di]
	p.lastNS, p.lastPrefill = winner.w.Namespace, false
	sel = Selection{Namespace: winner.w.Namespace, Decode: winner.pin(), DecodeReason: reason, PrefillReason: ReasonNoPrefillPool}
	decodeKey = winner.key()
	blocks = ceilDiv(req.PromptTokens, uint64(max(winner.w.BlockSize, 1)))
	if winner.w.Role != discovery.RoleDecode {
		return sel, decodeKey, prefillKey, blocks
	}
	cands = p.pools.prefill[sel.Namespace]
	if len(cands) > 0 {
		pi, reason := p.choose(r, load.Prefill, cands, req)
		sel.Prefill, sel.HasPrefill, sel.PrefillReason = cands[pi].pin(), true, reason
		p.lastPrefill = true
		prefillKey = cands[pi].key()
	}
	return sel, decodeKey, prefillKey, blocks
}

// Ended implements Picker.
func (p *LoadBased) Ended(req Request, sel Selection) {
	keys := []load.Key{{Namespace: sel.Namespace, WorkerID: sel.Decode.WorkerID, DPRank: sel.Decode.DPRank}}
	if sel.HasPrefill {
		keys = append(keys, load.Key{Namespace: sel.Namespace, WorkerID: sel.Prefill.WorkerID, DPRank: sel.Prefill.DPRank})
	}
	p.store.EndDispatch(req.ID, keys...)
}

// choose scores the candidates for a phase and returns the chosen index
// and the reason.
func (p *LoadBased) choose(r *load.Reader, phase load.Phase, cands []candidate, req Request) (int, string) {
	switch p.policy {
	case policyRoundRobin:
		for i := range cands {
			cands[i].ok = false
		}
		return p.rotate(phase, allIndexes(&p.tied, len(cands))), ReasonRoundRobin
	case policyRandom:
		for i := range cands {
			cands[i].ok = false
		}
		return p.rng.IntN(len(cands)), ReasonRandom
	}
	anyFresh, anyCapacity := false, false
	for i := range cands {
		c := &cands[i]
		c.ok, c.fresh, c.stalled = false, false, false
		capacity, perBlock := capacityOf(c.w, phase)
		if capacity == 0 {
			continue
		}
		anyCapacity = true
		sc := r.ScoreRef(c.ref, phase)
		var backlog uint64
		switch sc.Kind {
		case load.Fresh:
			c.fresh, anyFresh = true, true
			backlog = sc.Backlog
		case load.Quiet:
		default:
			continue // silent under load, or no such field: no defined cost
		}
		c.stalled = sc.Stalled
		if phase == load.Prefill {
			backlog += sc.Tokens
		} else {
			backlog += sc.Blocks + ceilDiv(req.PromptTokens, perBlock)
		}
		c.cost = float64(backlog) / float64(capacity)
		c.ok = true
	}
	switch {
	case !anyCapacity:
		return p.rotate(phase, allIndexes(&p.tied, len(cands))), ReasonRoundRobin
	case !anyFresh:
		return p.rotate(phase, allIndexes(&p.tied, len(cands))), ReasonRoundRobinStale
	}
	// A possibly stalled rank sits out while another has a cost.
	for i := range cands {
		if cands[i].stalled {
			cands[i].ok = false
		}
	}
	best := -1
	for i := range cands {
		if cands[i].ok && (best < 0 || cands[i].cost < cands[best].cost) {
			best = i
		}
	}
	if best < 0 { // every costed rank is stalled: nothing better to do than rotate
		return p.rotate(phase, allIndexes(&p.tied, len(cands))), ReasonRoundRobinStale
	}
	tied := p.tied[:0]
	for i := range cands {
		if cands[i].ok && cands[i].cost == cands[best].cost {
			tied = append(tied, i)
		}
	}
	p.tied = tied
	return p.rotate(phase, tied), ReasonLoad
}

// rotate advances the phase's cursor over the given indexes.
func (p *LoadBased) rotate(phase load.Phase, idx []int) int {
	c := p.cursors[phase]
	p.cursors[phase]++
	return idx[c%uint64(len(idx))]
}

func allIndexes(buf *[]int, n int) []int {
	s := (*buf)[:0]
	for i := 0; i < n; i++ {
		s = append(s, i)
	}
	*buf = s
	return s
}

// capacityOf returns the phase's capacity (0 when the card does not carry
// it) and, for decode, the block size.
func capacityOf(w *discovery.Worker, phase load.Phase) (capacity, blockSize uint64) {
	rt := &w.Runtime
	if phase == load.Prefill {
		if rt.MaxNumBatchedTokens == nil {
			return 0, 0
		}
		return *rt.MaxNumBatchedTokens, 1
	}
	if rt.TotalKVBlocks == nil || w.BlockSize == 0 {
		return 0, 0
	}
	return *rt.TotalKVBlocks, uint64(w.BlockSize)
}

func appendRanks(dst []candidate, w *discovery.Worker) []candidate {
	for r := uint32(0); r < max(w.Runtime.DPSize, 1); r++ {
		dst = append(dst, candidate{w: w, rank: w.Runtime.DPStartRank + r})
	}
	return dst
}

func ceilDiv(a, b uint64) uint64 {
	if b == 0 {
		return 0
	}
	return (a + b - 1) / b
}

// pools are a request's candidate ranks after the mixed-namespace rules:
// decode candidates across every eligible namespace, prefill candidates per
// namespace. They are rebuilt only when the snapshot, the model or the
// namespaces change, and their store handles when the store's generation
// does.
type pools struct {
	decode  []candidate
	prefill map[string][]candidate

	snap       *discovery.Snapshot
	model      string
	namespaces []string
	refGen     uint64
	resolved   bool
}

func (out *pools) fillCached(req Request, snap *discovery.Snapshot) {
	if out.snap == snap && out.model == req.Model && slices.Equal(out.namespaces, req.Namespaces) {
		return
	}
	out.fill(req, snap)
	out.snap, out.model, out.resolved = snap, req.Model, false
	out.namespaces = append(out.namespaces[:0], req.Namespaces...)
}

// resolve (re)takes the store handles of every cached candidate.
func (out *pools) resolve(r *load.Reader) {
	if out.resolved && out.refGen == r.Generation() {
		return
	}
	for i := range out.decode {
		out.decode[i].ref = r.Ref(out.decode[i].key())
	}
	for _, cs := range out.prefill {
		for i := range cs {
			cs[i].ref = r.Ref(cs[i].key())
		}
	}
	out.refGen, out.resolved = r.Generation(), true
}

// fill applies the mixed-namespace rules per namespace: in a namespace
// holding both prefill and decode workers of the model, aggregated workers
// are not decode candidates; elsewhere decode and aggregated workers are.
// Prefill workers are kept only beside a decode worker, so a prefill pin
// is never paired with an aggregated one.
func (out *pools) fill(req Request, snap *discovery.Snapshot) {
	out.decode = out.decode[:0]
	if out.prefill == nil {
		out.prefill = map[string][]candidate{}
	}
	clear(out.prefill)
	for _, ns := range req.Namespaces {
		var hasPrefill, hasDecode bool
		first, last := -1, -1
		for i, w := range snap.Workers {
			if w.Namespace != ns || w.Model != req.Model {
				continue
			}
			if first < 0 {
				first = i
			}
			last = i
			hasPrefill = hasPrefill || w.Role == discovery.RolePrefill
			hasDecode = hasDecode || w.Role == discovery.RoleDecode
		}
		if first < 0 {
			continue
		}
		for _, w := range snap.Workers[first : last+1] {
			if w.Namespace != ns || w.Model != req.Model {
				continue
			}
			switch w.Role {
			case discovery.RoleDecode:
				out.decode = appendRanks(out.decode, w)
			case discovery.RoleAggregated:
				if !(hasPrefill && hasDecode) {
					out.decode = appendRanks(out.decode, w)
				}
			case discovery.RolePrefill:
				if hasDecode {
					out.prefill[ns] = appendRanks(out.prefill[ns], w)
				}
			}
		}
	}
}

var _ Picker = (*LoadBased)(nil)

// Candidates implements Explainer: the decode candidates of the last pick
// and the prefill candidates of its namespace, each with its cost when the
// policy defined one.
func (p *LoadBased) Candidates(dst []Candidate) []Candidate {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.pools.decode {
		dst = append(dst, p.pools.decode[i].candidate("decode"))
	}
	if p.lastPrefill {
		for i, cs := 0, p.pools.prefill[p.lastNS]; i < len(cs); i++ {
			dst = append(dst, cs[i].candidate("prefill"))
		}
	}
	return dst
}

func (c *candidate) candidate(phase string) Candidate {
	return Candidate{Phase: phase, WorkerID: c.w.InstanceID, DPRank: c.rank, Cost: c.cost, Defined: c.ok}
}
