package workload

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// BurstyConfig describes on/off traffic: Poisson arrivals at Rate during each On period, silence
// during each Off period, repeating from time zero (which starts an On period).
type BurstyConfig struct {
	Rate   float64       // mean arrivals per second while on
	On     time.Duration // length of each burst
	Off    time.Duration // length of each silence; 0 degenerates to plain Poisson
	Count  int
	Prompt Range
	Output Range
}

func (c BurstyConfig) validate() error {
	var errs []error
	if c.On <= 0 {
		errs = append(errs, fmt.Errorf("On must be > 0, got %v", c.On))
	}
	if c.Off < 0 {
		errs = append(errs, fmt.Errorf("Off must be >= 0, got %v", c.Off))
	}
	return configError("bursty", append(errs,
		validRate("Rate", c.Rate),
		positive("Count", c.Count),
		c.Prompt.validate("Prompt"),
		c.Output.validate("Output"))...)
}

type bursty struct {
	cfg   BurstyConfig
	rng   *rand.Rand
	clock poissonClock // runs in "on-time": time with every Off period cut out
	n     int
}

// NewBursty returns the on/off Source. Arrivals are drawn as one Poisson process over on-time and
// then mapped onto the wall timeline; because the process is memoryless this is exactly a Poisson
// process that pauses during Off periods, with no special cases at period boundaries.
func NewBursty(cfg BurstyConfig, seed uint64) (Source, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rng := newRNG(seed)
	return &bursty{cfg: cfg, rng: rng, clock: poissonClock{rng: rng, rate: cfg.Rate}}, nil
}

func (b *bursty) Next() (Request, bool) {
	if b.n >= b.cfg.Count {
		return Request{}, false
	}
	b.n++
	u := b.clock.next()
	cycles := u / b.cfg.On
	at := u + cycles*b.cfg.Off
	n := b.cfg.Prompt.sample(b.rng)
	return Request{
		ID:        uint64(b.n),
		Arrival:   at,
		Tokens:    appendRandom(make([]uint32, 0, n), b.rng, n),
		MaxTokens: b.cfg.Output.sample(b.rng),
	}, true
}
