package workload

import (
	"fmt"
	"math/rand/v2"
)

// SharedPrefixConfig models tenants that share a system prompt: Groups groups of UsersPerGroup
// users; every request of a group starts with the group's SystemTokens-long prefix followed by a
// fresh QuestionTokens-long question. This is the workload where KV-aware routing should win.
type SharedPrefixConfig struct {
	Groups         int
	UsersPerGroup  int
	SystemTokens   int   // S: prefix shared within a group
	QuestionTokens int   // Q: unique per request
	Output         Range // O
	Rate           float64
	Count          int
}

// maxPrefixTokens bounds Groups*SystemTokens, the only memory this generator holds.
const maxPrefixTokens = 1 << 24

func (c SharedPrefixConfig) validate() error {
	errs := []error{
		positive("Groups", c.Groups),
		positive("UsersPerGroup", c.UsersPerGroup),
		positive("SystemTokens", c.SystemTokens),
		positive("QuestionTokens", c.QuestionTokens),
		c.Output.validate("Output"),
		validRate("Rate", c.Rate),
		positive("Count", c.Count),
	}
	if c.SystemTokens > 0 && c.QuestionTokens > 0 && c.SystemTokens+c.QuestionTokens > MaxPromptTokens {
		errs = append(errs, fmt.Errorf("SystemTokens+QuestionTokens must be <= %d, got %d",
			MaxPromptTokens, c.SystemTokens+c.QuestionTokens))
	}
	if c.Groups > 0 && c.SystemTokens > 0 && c.Groups > maxPrefixTokens/c.SystemTokens {
		errs = append(errs, fmt.Errorf("Groups*SystemTokens must be <= %d", maxPrefixTokens))
	}
	if c.Groups > 0 && c.UsersPerGroup > 0 && c.Groups > int(^uint32(0))/c.UsersPerGroup {
		errs = append(errs, fmt.Errorf("Groups*UsersPerGroup must be <= %d", ^uint32(0)))
	}
	return configError("shared-prefix", errs...)
}

type sharedPrefix struct {
	cfg      SharedPrefixConfig
	rng      *rand.Rand
	clock    poissonClock
	prefixes [][]uint32 // one system prompt per group, drawn up front
	n        int
}

// NewSharedPrefix returns the shared-prefix Source. Each arrival picks a user uniformly; the user's
// group decides the prefix, so groups receive traffic in proportion to their user count.
func NewSharedPrefix(cfg SharedPrefixConfig, seed uint64) (Source, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rng := newRNG(seed)
	s := &sharedPrefix{cfg: cfg, rng: rng, clock: poissonClock{rng: rng, rate: cfg.Rate}}
	s.prefixes = make([][]uint32, cfg.Groups)
	for g := range s.prefixes {
		s.prefixes[g] = appendRandom(make([]uint32, 0, cfg.SystemTokens), rng, cfg.SystemTokens)
	}
	return s, nil
}

func (s *sharedPrefix) Next() (Request, bool) {
	if s.n >= s.cfg.Count {
		return Request{}, false
	}
	s.n++
	at := s.clock.next()
	user := s.rng.IntN(s.cfg.Groups * s.cfg.UsersPerGroup)
	group := user / s.cfg.UsersPerGroup
	// Each request gets its own copy of the prefix so a consumer may mutate or retain it freely.
	toks := make([]uint32, 0, s.cfg.SystemTokens+s.cfg.QuestionTokens)
	toks = append(toks, s.prefixes[group]...)
	toks = appendRandom(toks, s.rng, s.cfg.QuestionTokens)
	return Request{
		ID:        uint64(s.n),
		Arrival:   at,
		Tokens:    toks,
		MaxTokens: s.cfg.Output.sample(s.rng),
	}, true
}
