package picker

import "switchyard/router/load"

// leastKVBlocks is the example policy of docs/picker.md: in either phase,
// the rank with the fewest KV blocks in use wins (its sample's
// active_decode_blocks, else kv_used_blocks, plus the blocks pinned to it
// since). It shows what a policy needs and nothing more: the shared
// candidate rules come from the Scheduler, admit and sitOutStalled.
type leastKVBlocks struct{}

func (leastKVBlocks) choose(s *Scheduler, phase load.Phase, cands []candidate, _ Request) (int, string) {
	anyFresh := false
	for i := range cands {
		c := &cands[i]
		sc := s.reader.ScoreRef(c.ref, load.Decode)
		if c.admit(sc) {
			anyFresh = true
			c.cost = float64(sc.Backlog + sc.Blocks)
		} else {
			c.cost = float64(sc.Blocks)
		}
	}
	if !anyFresh || !sitOutStalled(cands) {
		// Nothing answered for its blocks, or every costed rank may be
		// stalled: rotate, and let no cost decide.
		undefine(cands)
		return s.rotateAll(phase, len(cands)), ReasonRoundRobinStale
	}
	i, _, _ := s.lowestCost(phase, cands)
	return i, ReasonLoad
}
