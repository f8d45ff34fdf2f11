// Package workload generates the request streams the simulator feeds into the routing core.
//
// Every generator is a pure, deterministic function of its Config and seed: randomness comes only
// from a math/rand/v2 PCG owned by the generator, nothing reads the wall clock and nothing starts a
// goroutine. That is what lets two simulator runs with the same inputs produce byte-identical
// recordings, and a picker comparison differ only in the picker.
package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Request is one inference request as the simulator will present it to the router.
type Request struct {
	ID      uint64
	Arrival time.Duration // offset from the run's start
	Tokens  []uint32      // the prompt's token ids; owned by the receiver
	// Prompt describes a trace prompt whose Tokens are not synthesized yet
	// (TraceConfig.DeferTokens); PromptLen, PromptTokens and
	// AppendBlockHashes serve either form.
	Prompt    *TracePrompt
	MaxTokens int    // output length
	Session   uint64 // 0 = none; multi-turn sessions share one
}

// Source yields requests in non-decreasing Arrival order; ok is false once it is exhausted.
type Source interface {
	Next() (req Request, ok bool)
}

// MaxPromptTokens caps any synthetic prompt. Configs are checked against it before anything is
// allocated, so a typo in a scenario file fails validation instead of exhausting memory.
const MaxPromptTokens = 1 << 21

// Range is an integer length drawn uniformly from [Min, Max]; Min == Max means fixed.
type Range struct{ Min, Max int }

// Fixed is the Range that always yields n.
func Fixed(n int) Range { return Range{n, n} }

func (r Range) validate(field string) error {
	switch {
	case r.Min < 1:
		return fmt.Errorf("%s.Min must be >= 1, got %d", field, r.Min)
	case r.Max < r.Min:
		return fmt.Errorf("%s.Max (%d) must be >= %s.Min (%d)", field, r.Max, field, r.Min)
	case r.Max > MaxPromptTokens:
		return fmt.Errorf("%s.Max must be <= %d, got %d", field, MaxPromptTokens, r.Max)
	}
	return nil
}

func (r Range) sample(rng *rand.Rand) int {
	if r.Min == r.Max {
		return r.Min // no draw, so fixing a length does not shift the rest of the stream
	}
	return r.Min + rng.IntN(r.Max-r.Min+1)
}

// DurationRange is a duration drawn uniformly from [Min, Max]; Min == Max means fixed.
type DurationRange struct{ Min, Max time.Duration }

func (r DurationRange) validate(field string) error {
	switch {
	case r.Min < 0:
		return fmt.Errorf("%s.Min must be >= 0, got %v", field, r.Min)
	case r.Max < r.Min:
		return fmt.Errorf("%s.Max (%v) must be >= %s.Min (%v)", field, r.Max, field, r.Min)
	}
	return nil
}

func (r DurationRange) sample(rng *rand.Rand) time.Duration {
	if r.Min == r.Max {
		return r.Min
	}
	return r.Min + time.Duration(rng.Int64N(int64(r.Max-r.Min)+1))
}

func validRate(field string, rate float64) error {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return fmt.Errorf("%s must be a finite rate > 0 (requests/s), got %v", field, rate)
	}
	return nil
}

func positive(field string, n int) error {
	if n < 1 {
		return fmt.Errorf("%s must be >= 1, got %d", field, n)
	}
	return nil
}

// configError prefixes every problem with the generator name, so a scenario with several
// workloads says which one is wrong; all problems are reported at once.
func configError(kind string, errs ...error) error {
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("workload %s: invalid config: %w", kind, err)
	}
	return nil
}

// newRNG derives the generator's private PCG from the seed. The second PCG word is a fixed
// constant so one uint64 is the whole seed a scenario has to record.
func newRNG(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x5377_6974_6368_7964)) // "Switchyd"
}

// poissonClock produces the arrival times of a Poisson process. Time is accumulated in float
// seconds and converted per arrival, so rounding to nanoseconds never accumulates drift.
type poissonClock struct {
	rng  *rand.Rand
	rate float64
	t    float64 // seconds
}

func (c *poissonClock) next() time.Duration {
	c.t += c.rng.ExpFloat64() / c.rate
	return seconds(c.t)
}

func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/1e9 {
		return time.Duration(math.MaxInt64) // a run this long is absurd; saturate rather than wrap
	}
	return time.Duration(s * 1e9)
}
