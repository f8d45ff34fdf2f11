package engine

import "switchyard/router/kv"

// seq is a request inside the engine. Progress follows vLLM v1's single
// counter: computed tokens chase target = prompt + generated; whenever they
// meet, the step emits a token. Decode is simply the case target−computed=1,
// and recompute after preemption is a prefill of prompt + generated.
type seq struct {
	req       Request
	maxTokens int
	generated int
	computed  int

	// Router-compatible hashes of the prompt's complete blocks: tokens are
	// the LocalBlockHash the router matches on, hashes the chained engine
	// block hash. Generated tokens are never hashed (the model has no token
	// values for them), so their blocks stay private.
	tokens, hashes []uint64

	cached  []int32 // pool slots of prompt prefix blocks 0..len-1, pinned
	private int     // other blocks held
	hit     int     // prompt tokens the last admission found cached
	// imported tokens still to take on admission; a preempted request
	// lost them and recomputes.
	imported int
}

func newSeq(r Request, blockSize int) *seq {
	local := kv.BlockHashes(r.Tokens, blockSize, kv.Seed("", ""))
	return &seq{req: r, maxTokens: max(1, r.MaxTokens), tokens: local, hashes: kv.SequenceHashes(local),
		imported: min(max(r.Imported, 0), len(r.Tokens))}
}

func (s *seq) target() int    { return len(s.req.Tokens) + s.generated }
func (s *seq) held() int      { return len(s.cached) + s.private }
func (s *seq) decoding() bool { return s.generated > 0 && s.target()-s.computed <= 1 }
