package workload

import (
	"math/rand/v2"
	"slices"
)

// VocabSize bounds every synthesized token id to [0, VocabSize), so prompts are valid for any
// tokenizer at least this large and never collide with ids reserved at the top of a vocabulary.
const VocabSize = 32000

// TraceBlockTokens is how many tokens one Mooncake hash id stands for.
const TraceBlockTokens = 512

// Domain separators keep the block stream, the padding stream and synthetic output streams from
// ever producing the same sequence for the same integer input.
const (
	domainBlock   = 0x9e6c_63d0_676a_9a99
	domainPad     = 0xc2b2_ae3d_27d4_eb4f
	domainOutput  = 0x1656_67b1_9e37_79f9
	splitmixGamma = 0x9e37_79b9_7f4a_7c15
)

// splitmix is SplitMix64: a tiny stateless-per-step generator. It is used where tokens must be a
// pure function of an identifier (hash id, session, turn) rather than of the generator's position
// in its random stream.
type splitmix uint64

func (s *splitmix) next() uint64 {
	*s += splitmixGamma
	return splitmixMix(uint64(*s))
}

// splitmixMix is SplitMix64's output function.
func splitmixMix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58_476d_1ce4_e5b9
	z = (z ^ (z >> 27)) * 0x94d0_49bb_1331_11eb
	return z ^ (z >> 31)
}

// fillTokens fills out with the tokens of the stream that follows state s,
// as len(out) calls of s.next would, keeping the state in a register.
func fillTokens(out []uint32, s splitmix) {
	x, g := uint64(s), uint64(splitmixGamma)
	i := 0
	// Four at a time: the tokens are independent, so their multiplies overlap.
	for ; i+4 <= len(out); i += 4 {
		o := out[i : i+4 : i+4]
		o[0] = token(splitmixMix(x + g))
		o[1] = token(splitmixMix(x + 2*g))
		o[2] = token(splitmixMix(x + 3*g))
		o[3] = token(splitmixMix(x + 4*g))
		x += 4 * g
	}
	for ; i < len(out); i++ {
		x += g
		out[i] = token(splitmixMix(x))
	}
}

// token maps 64 random bits onto [0, VocabSize) by multiply-shift, avoiding a division.
func token(x uint64) uint32 { return uint32(((x >> 32) * VocabSize) >> 32) }

// appendBlock appends the first n (<= TraceBlockTokens) tokens of hash id h's block. The block is
// a pure function of h, so equal hash ids give equal token runs whatever the engine's block size.
func appendBlock(dst []uint32, h uint64, n int) []uint32 {
	dst, out := grow(dst, n)
	fillTokens(out, blockState(h))
	return dst
}

// blockState is the generator state hash id h's block starts from.
func blockState(h uint64) splitmix {
	s := splitmix(h ^ domainBlock)
	return splitmix(s.next()) // scramble first so neighbouring ids do not start from neighbouring states
}

// padToken is the token at prompt position pos when a trace line's hash ids cover fewer tokens
// than its input_length; it depends only on the line's last hash id and the position.
func padToken(last uint64, pos int) uint32 {
	s := splitmix(last ^ domainPad ^ uint64(pos)*splitmixGamma)
	return token(s.next())
}

// appendOutput appends n synthetic output tokens for (key, turn): what the model "said", needed
// so a multi-turn session can carry it into the next prompt.
func appendOutput(dst []uint32, key, turn uint64, n int) []uint32 {
	s := splitmix(key ^ domainOutput)
	s = splitmix(s.next() ^ turn)
	s = splitmix(s.next())
	dst, out := grow(dst, n)
	fillTokens(out, s)
	return dst
}

// grow extends dst by n tokens and returns it with the new part, to be
// filled by index: a prompt's tens of thousands of tokens are written
// without a capacity check each.
func grow(dst []uint32, n int) ([]uint32, []uint32) {
	if n <= 0 {
		return dst, nil
	}
	dst = slices.Grow(dst, n)
	dst = dst[:len(dst)+n]
	return dst, dst[len(dst)-n:]
}

// appendRandom appends n token ids drawn from the generator's own stream.
func appendRandom(dst []uint32, rng *rand.Rand, n int) []uint32 {
	for range n {
		dst = append(dst, uint32(rng.IntN(VocabSize)))
	}
	return dst
}
