package validate

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"switchyard/internal/groundtruth"
)

// Random streams of a run, so that adding draws to one part never shifts
// another's.
const (
	streamPrompts = iota + 1
	streamTrace
	streamArrivals // + stage index
)

// defaultVocab bounds random token ids when the model gives no vocab size.
const defaultVocab = 32000

// simRequest is one request of the simulated workload.
type simRequest struct {
	id        string
	stage     int
	offset    time.Duration // arrival, from the start of its stage
	tokens    []uint32
	maxTokens int

	// first is when the client saw its first streamed chunk: when the
	// engine had generated the run's first-chunk tokens (or finished).
	sent, first, done time.Time
	generated         int
	failed            bool
}

// sharedPrefixPrompts builds inference-perf's prompts: num_groups system
// prompts of system_prompt_len random token ids, each followed in
// prompts_per_group prompts by a question of question_len random ids, the
// whole list shuffled once.
func sharedPrefixPrompts(sp groundtruth.SharedPrefixes, vocab int, rng *rand.Rand) [][]uint32 {
	random := func(n int) []uint32 {
		ids := make([]uint32, n)
		for i := range ids {
			ids[i] = uint32(rng.IntN(vocab))
		}
		return ids
	}
	prompts := make([][]uint32, 0, sp.Prompts())
	for range sp.NumGroups {
		system := random(sp.SystemPromptLen)
		for range sp.PromptsPerGroup {
			p := make([]uint32, 0, sp.SystemPromptLen+sp.QuestionLen)
			prompts = append(prompts, append(append(p, system...), random(sp.QuestionLen)...))
		}
	}
	rng.Shuffle(len(prompts), func(i, j int) { prompts[i], prompts[j] = prompts[j], prompts[i] })
	return prompts
}

// stageRequests is one inference-perf stage: request n sends prompt n mod
// len(prompts); arrivals are rate×duration exponential gaps rescaled to sum
// to the duration, so the last request arrives at the stage's end.
func stageRequests(st groundtruth.WorkloadStage, stage int, prompts [][]uint32, outputLen int, rng *rand.Rand) []*simRequest {
	n := st.NumRequests
	gaps := make([]float64, n)
	sum := 0.0
	for i := range gaps {
		gaps[i] = rng.ExpFloat64() / st.RateRPS
		sum += gaps[i]
	}
	scale := st.DurationS / sum
	reqs := make([]*simRequest, n)
	at := 0.0
	for i := range reqs {
		at += gaps[i] * scale
		reqs[i] = &simRequest{
			id: fmt.Sprintf("s%d-%d", stage, i), stage: stage, offset: seconds(at),
			tokens: prompts[i%len(prompts)], maxTokens: outputLen,
		}
	}
	return reqs
}

// traceRequests builds the requests of a request_trace: prompts whose full
// blocks are derived from prefix_block_ids (equal id, equal tokens) or whose
// first shared_prefix_tokens come from their shared_prefix_group, the rest
// random, so the engine's prefix cache sees exactly the sharing recorded.
func traceRequests(exp *groundtruth.Experiment, rng *rand.Rand) []*simRequest {
	vocab := vocabOf(exp)
	bs := traceBlockSize(exp)
	reqs := make([]*simRequest, len(exp.Requests))
	for i, r := range exp.Requests {
		tokens := make([]uint32, r.InputTokens)
		shared := 0
		for b, id := range r.PrefixBlockIDs {
			for j := range bs {
				tokens[b*bs+j] = derivedToken(1, id, uint64(j), vocab)
			}
			shared = (b + 1) * bs
		}
		if r.SharedPrefixGroup != nil && r.SharedPrefixTokens > shared {
			for j := shared; j < r.SharedPrefixTokens; j++ {
				tokens[j] = derivedToken(2, uint64(*r.SharedPrefixGroup), uint64(j), vocab)
			}
			shared = r.SharedPrefixTokens
		}
		for j := shared; j < len(tokens); j++ {
			tokens[j] = uint32(rng.IntN(vocab))
		}
		reqs[i] = &simRequest{id: r.ID, offset: seconds(r.ArrivalS), tokens: tokens, maxTokens: r.OutputTokens}
	}
	// Replay in arrival order; the file's order breaks ties.
	slices.SortStableFunc(reqs, func(a, b *simRequest) int { return cmp.Compare(a.offset, b.offset) })
	return reqs
}

func traceBlockSize(exp *groundtruth.Experiment) int {
	if pb := exp.Workload.PrefixBlocks; pb != nil && pb.BlockSizeTokens > 0 {
		return pb.BlockSizeTokens
	}
	return exp.Engine.BlockSize
}

// derivedToken is a token id that depends only on (kind, key, position):
// a splitmix64 finaliser over the three, reduced to the vocabulary.
func derivedToken(kind, key, pos uint64, vocab int) uint32 {
	x := kind*0x9e3779b97f4a7c15 ^ key*0xbf58476d1ce4e5b9 ^ pos*0x94d049bb133111eb
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return uint32(x % uint64(vocab))
}

func vocabOf(exp *groundtruth.Experiment) int {
	if v := exp.Model.VocabSize; v > 0 {
		return v
	}
	return defaultVocab
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * 1e9)) }

// window selects the requests a per-request stage covers: "all requests",
// "arrival_s < X" or "arrival_s >= X".
type window func(arrivalS float64) bool

func parseWindow(s string) (window, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all requests" {
		return func(float64) bool { return true }, nil
	}
	for _, op := range []string{"<=", ">=", "<", ">"} {
		rest, ok := strings.CutPrefix(s, "arrival_s "+op+" ")
		if !ok {
			continue
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			break
		}
		switch op {
		case "<":
			return func(a float64) bool { return a < x }, nil
		case "<=":
			return func(a float64) bool { return a <= x }, nil
		case ">":
			return func(a float64) bool { return a > x }, nil
		default:
			return func(a float64) bool { return a >= x }, nil
		}
	}
	return nil, fmt.Errorf("window %q: want \"all requests\" or \"arrival_s OP SECONDS\"", s)
}
