package picker

import (
	"slices"

	"switchyard/router/discovery"
	"switchyard/router/load"
)

// The candidate rules every policy shares: which ranks a request may be
// pinned to (pools), which of them have a defined backlog (admit), and
// which sit out as possibly stalled (sitOutStalled). Policies add only how
// a phase's rank is chosen among what is left.

// admit classifies c for a phase from its load score: a fresh sample or a
// quiet rank gives it a defined backlog; a rank silent under load, or whose
// sample lacks the phase's field, has none. It reports whether the sample
// was fresh.
func (c *candidate) admit(sc load.Score) (fresh bool) {
	c.fresh = sc.Kind == load.Fresh
	c.ok = c.fresh || sc.Kind == load.Quiet
	c.stalled = sc.Stalled
	return c.fresh
}

// sitOutStalled takes a possibly stalled rank out of the running while
// another rank with a cost is not stalled; with none, every costed rank
// stays in. It reports whether an unstalled costed rank remains.
func sitOutStalled(cands []candidate) bool {
	costed := false
	for i := range cands {
		costed = costed || cands[i].ok && !cands[i].stalled
	}
	if costed {
		for i := range cands {
			if cands[i].stalled {
				cands[i].ok = false
			}
		}
	}
	return costed
}

// undefine marks every candidate's cost as not deciding the pick (a
// rotation or a draw chose instead).
func undefine(cands []candidate) {
	for i := range cands {
		cands[i].ok = false
	}
}

// lowestCost returns the costed candidate of least cost, equal costs
// rotating on the phase's cursor, and how many shared that cost; ok is
// false when no candidate has a cost.
func (s *Scheduler) lowestCost(phase load.Phase, cands []candidate) (i, tied int, ok bool) {
	best := cheapest(cands)
	if best < 0 {
		return 0, 0, false
	}
	ties := s.tied[:0]
	for i := range cands {
		if cands[i].ok && cands[i].cost == cands[best].cost {
			ties = append(ties, i)
		}
	}
	s.tied = ties
	return s.rotate(phase, ties), len(ties), true
}

// cheapest is the first costed candidate of least cost, or -1.
func cheapest(cands []candidate) int {
	best := -1
	for i := range cands {
		if cands[i].ok && (best < 0 || cands[i].cost < cands[best].cost) {
			best = i
		}
	}
	return best
}

// rotateAll advances the phase's cursor over all n candidates.
func (s *Scheduler) rotateAll(phase load.Phase, n int) int {
	c := s.cursors[phase]
	s.cursors[phase]++
	return int(c % uint64(n))
}

// rotate advances the phase's cursor over the given indexes.
func (s *Scheduler) rotate(phase load.Phase, idx []int) int {
	c := s.cursors[phase]
	s.cursors[phase]++
	return idx[c%uint64(len(idx))]
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
