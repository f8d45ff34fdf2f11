package workload

import "math/rand/v2"

// PoissonConfig describes open-loop arrivals at a constant mean rate.
type PoissonConfig struct {
	Rate   float64 // mean arrivals per second
	Count  int     // requests to generate
	Prompt Range   // prompt length in tokens
	Output Range   // MaxTokens
}

func (c PoissonConfig) validate() error {
	return configError("poisson",
		validRate("Rate", c.Rate),
		positive("Count", c.Count),
		c.Prompt.validate("Prompt"),
		c.Output.validate("Output"))
}

type poisson struct {
	cfg   PoissonConfig
	rng   *rand.Rand
	clock poissonClock
	n     int
}

// NewPoisson returns a Source whose inter-arrival gaps are exponential with mean 1/Rate and whose
// prompts are random token ids.
func NewPoisson(cfg PoissonConfig, seed uint64) (Source, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rng := newRNG(seed)
	return &poisson{cfg: cfg, rng: rng, clock: poissonClock{rng: rng, rate: cfg.Rate}}, nil
}

func (p *poisson) Next() (Request, bool) {
	if p.n >= p.cfg.Count {
		return Request{}, false
	}
	p.n++
	at := p.clock.next()
	n := p.cfg.Prompt.sample(p.rng)
	return Request{
		ID:        uint64(p.n),
		Arrival:   at,
		Tokens:    appendRandom(make([]uint32, 0, n), p.rng, n),
		MaxTokens: p.cfg.Output.sample(p.rng),
	}, true
}
