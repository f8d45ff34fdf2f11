package engine

import "switchyard/router/kv"

// seq is a request inside the engine. Progress follows vLLM v1's single
// counter: computed tokens chase target = prompt + generated; whenever they
// meet, the step emits a token. Decode is simply the case target−computed=1,
// and recompute after preemption is a prefill of prompt + generated.
type seq struct {
	req       Request
	prompt    int // tokens
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
	n := r.promptLen()
	s := &seq{req: r, prompt: n, maxTokens: max(1, r.MaxTokens), imported: min(max(r.Imported, 0), n)}
	if b := r.Blocks; b != nil && b.BlockSize == blockSize {
		s.tokens, s.hashes = b.Local, b.Chained
	} else {
		s.tokens = kv.BlockHashes(r.Tokens, blockSize, kv.Seed("", ""))
		s.hashes = kv.SequenceHashes(s.tokens)
	}
	return s
}

func (s *seq) target() int    { return s.prompt + s.generated }
func (s *seq) held() int      { return len(s.cached) + s.private }
func (s *seq) decoding() bool { return s.generated > 0 && s.target()-s.computed <= 1 }
