package load

import "time"

// Phase is which half of a disaggregated request a cost is for.
type Phase uint8

const (
	// Prefill reads active_prefill_tokens.
	Prefill Phase = iota
	// Decode reads active_decode_blocks, else kv_used_blocks (what
	// dynamo.vllm workers publish).
	Decode
)

func (p Phase) String() string {
	if p == Prefill {
		return "prefill"
	}
	return "decode"
}

// Backlog returns the phase's backlog and whether the sample carries it.
func (a *ActiveLoad) Backlog(p Phase) (uint64, bool) {
	switch {
	case p == Prefill:
		return a.ActivePrefillTokens, a.HasPrefillTokens
	case a.HasDecodeBlocks:
		return a.ActiveDecodeBlocks, true
	}
	return a.KVUsedBlocks, a.HasKVUsedBlocks
}

// StatusKind classifies a rank for one phase under the best-effort
// contract: publishers are change-driven and fall silent when load is
// constant, so a missing fresh sample is not in itself a sign of trouble.
type StatusKind uint8

const (
	// Fresh: a sample younger than max staleness carries the phase's field.
	Fresh StatusKind = iota
	// Quiet: never published, or the last sample reported no backlog. It
	// counts as idle and competes with zero backlog.
	Quiet
	// SilentUnderLoad: the last (stale) sample reported a backlog; the rank
	// may be stalled, so it has no cost while another rank has one.
	SilentUnderLoad
	// Undefined: the latest sample does not carry the phase's field (the
	// nil active_prefill_tokens of dynamo.vllm); no cost can be computed.
	Undefined
)

func (k StatusKind) String() string {
	return [...]string{"fresh", "quiet", "silent_under_load", "undefined"}[k]
}

// Status is a rank's state for one phase. Backlog is the phase's field of a
// fresh sample (zero when quiet).
type Status struct {
	Kind    StatusKind
	Backlog uint64
}

// StatusOf classifies rank k for phase p at now, against max staleness.
func (s *Store) StatusOf(k Key, p Phase, now time.Time) Status {
	r := s.Reader(now)
	defer r.Close()
	return r.Status(k, p)
}

// AnyFresh reports whether any of the ranks has a fresh sample carrying the
// phase's field. When none has, the load stream itself is silent or down,
// and the pickers rotate round-robin across all candidates.
func (s *Store) AnyFresh(keys []Key, p Phase, now time.Time) bool {
	r := s.Reader(now)
	defer r.Close()
	for _, k := range keys {
		if r.Status(k, p).Kind == Fresh {
			return true
		}
	}
	return false
}
