package workload

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
)

// MaxSynthTraceRequests bounds a synthetic trace's length.
const MaxSynthTraceRequests = 1 << 20

// synthOpenConversations bounds the conversations a synthetic trace keeps open at once; when all
// are open, a new conversation replaces one at random.
const synthOpenConversations = 64

// SynthTraceConfig describes a conversation trace written in the Mooncake JSONL format, so tests,
// examples and users without the Mooncake release can replay a trace with shared prefixes.
//
// Each request either continues an open conversation (its prompt is the conversation so far plus a
// new message, so it shares every full block of the previous prompt) or opens one (its prompt is
// one of the shared system prompts plus a message). Hash ids follow Mooncake's rules: one id per
// TraceBlockTokens tokens, len(hash_ids) == ceil(input_length / TraceBlockTokens), and equal ids
// mean equal blocks.
type SynthTraceConfig struct {
	Requests      int
	Rate          float64 // arrivals per second (a Poisson process)
	SystemPrompts int     // distinct system prompts conversations open with
	SystemBlocks  int     // blocks per system prompt
	// Continue is the probability that a request continues an open conversation, in [0, 1].
	Continue float64
	Message  Range // new tokens per request
	Output   Range // output tokens per request
	// MaxInput ends a conversation whose next prompt would be longer; that request opens a new
	// conversation instead.
	MaxInput int
}

// DefaultSynthTrace is a small conversation trace: 200 requests over about 50 s, three system
// prompts of 2,048 tokens, prompts up to 16,384 tokens.
func DefaultSynthTrace() SynthTraceConfig {
	return SynthTraceConfig{Requests: 200, Rate: 4, SystemPrompts: 3, SystemBlocks: 4, Continue: 0.7,
		Message: Range{64, 1024}, Output: Range{16, 512}, MaxInput: 16384}
}

func (c SynthTraceConfig) validate() error {
	errs := []error{
		positive("Requests", c.Requests),
		validRate("Rate", c.Rate),
		positive("SystemPrompts", c.SystemPrompts),
		positive("SystemBlocks", c.SystemBlocks),
		c.Message.validate("Message"),
		c.Output.validate("Output"),
		positive("MaxInput", c.MaxInput),
	}
	if c.Requests > MaxSynthTraceRequests {
		errs = append(errs, fmt.Errorf("Requests must be <= %d, got %d", MaxSynthTraceRequests, c.Requests))
	}
	if !(c.Continue >= 0 && c.Continue <= 1) {
		errs = append(errs, fmt.Errorf("Continue must be in [0, 1], got %v", c.Continue))
	}
	if c.MaxInput > MaxPromptTokens {
		errs = append(errs, fmt.Errorf("MaxInput must be <= %d, got %d", MaxPromptTokens, c.MaxInput))
	}
	// A conversation's first prompt must fit, or no request could be written.
	if first := int64(c.SystemBlocks)*TraceBlockTokens + int64(c.Message.Max); c.SystemBlocks > 0 && first > int64(c.MaxInput) {
		errs = append(errs, fmt.Errorf("SystemBlocks*%d + Message.Max must be <= MaxInput (%d), got %d",
			TraceBlockTokens, c.MaxInput, first))
	}
	if c.SystemPrompts > 1<<16 || c.SystemBlocks > 1<<12 {
		errs = append(errs, errors.New("SystemPrompts must be <= 65536 and SystemBlocks <= 4096"))
	}
	return configError("synthetic trace", errs...)
}

// conversation is an open conversation: the ids of its full blocks and its length in tokens
// (the last prompt plus its output).
type conversation struct {
	full   []uint64
	tokens int
}

// synthTrace holds the generator's state between lines.
type synthTrace struct {
	cfg    SynthTraceConfig
	rng    *rand.Rand
	nextID uint64 // the next fresh hash id; ids below it belong to system prompts or earlier blocks
	open   []conversation
}

// WriteSynthTrace writes cfg.Requests lines of a synthetic Mooncake-format trace to w. The same
// config and seed always write the same bytes.
func WriteSynthTrace(w io.Writer, cfg SynthTraceConfig, seed uint64) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	g := &synthTrace{cfg: cfg, rng: newRNG(seed), nextID: uint64(cfg.SystemPrompts * cfg.SystemBlocks)}
	clock := poissonClock{rng: g.rng, rate: cfg.Rate}
	bw := bufio.NewWriter(w)
	var line []byte
	var start int64
	for i := range cfg.Requests {
		at := clock.next().Milliseconds()
		if i == 0 {
			start = at // timestamps count from the trace's start, as Mooncake's do
		}
		ids, input, output := g.request()
		line = appendTraceLine(line[:0], at-start, input, output, ids)
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// request draws the next request: its hash ids and lengths.
func (g *synthTrace) request() (ids []uint64, input, output int) {
	msg, output := g.cfg.Message.sample(g.rng), g.cfg.Output.sample(g.rng)
	i := -1
	if len(g.open) > 0 && g.rng.Float64() < g.cfg.Continue {
		i = g.rng.IntN(len(g.open))
		if g.open[i].tokens+msg > g.cfg.MaxInput {
			g.open = append(g.open[:i], g.open[i+1:]...) // the conversation is full: it ends
			i = -1
		}
	}
	if i < 0 {
		i = g.openConversation()
	}
	c := &g.open[i]
	input = c.tokens + msg
	ids = append([]uint64(nil), c.full...)
	for len(ids) < ceilDiv(input, TraceBlockTokens) {
		ids = append(ids, g.nextID)
		g.nextID++
	}
	// Only the prompt's full blocks stay shared: the output extends its last, partial one.
	c.full = ids[:input/TraceBlockTokens]
	c.tokens = input + output
	return ids, input, output
}

// openConversation starts a conversation on a system prompt and returns its index, replacing a
// random open one when the bound is reached.
func (g *synthTrace) openConversation() int {
	sys := uint64(g.rng.IntN(g.cfg.SystemPrompts) * g.cfg.SystemBlocks)
	c := conversation{tokens: g.cfg.SystemBlocks * TraceBlockTokens}
	for b := range uint64(g.cfg.SystemBlocks) {
		c.full = append(c.full, sys+b)
	}
	if len(g.open) < synthOpenConversations {
		g.open = append(g.open, c)
		return len(g.open) - 1
	}
	i := g.rng.IntN(len(g.open))
	g.open[i] = c
	return i
}

// appendTraceLine writes one record as the Mooncake release spells it.
func appendTraceLine(b []byte, timestamp int64, input, output int, ids []uint64) []byte {
	b = append(b, `{"timestamp": `...)
	b = strconv.AppendInt(b, timestamp, 10)
	b = append(b, `, "input_length": `...)
	b = strconv.AppendInt(b, int64(input), 10)
	b = append(b, `, "output_length": `...)
	b = strconv.AppendInt(b, int64(output), 10)
	b = append(b, `, "hash_ids": [`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendUint(b, id, 10)
	}
	return append(b, "]}\n"...)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
