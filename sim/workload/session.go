package workload

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
)

// SessionConfig models multi-turn chats. Sessions start as a Poisson process at Rate; each has
// Turns turns separated by Think. A turn's prompt is the whole previous conversation (the previous
// prompt, then the previous turn's output) followed by a new user message of Message tokens, so
// consecutive turns of a session share an ever-growing prefix.
//
// The generator is open loop: Think is measured from the previous turn's arrival, not from its
// completion, because completion times only exist inside the simulator.
type SessionConfig struct {
	Sessions int
	Turns    int
	Rate     float64 // session starts per second
	Think    DurationRange
	Message  Range // Q: new user tokens per turn
	Output   Range // output tokens per turn
}

func (c SessionConfig) validate() error {
	errs := []error{
		positive("Sessions", c.Sessions),
		positive("Turns", c.Turns),
		validRate("Rate", c.Rate),
		c.Think.validate("Think"),
		c.Message.validate("Message"),
		c.Output.validate("Output"),
	}
	// The last turn carries every earlier message and output; refuse configs whose final prompt
	// would exceed the cap rather than discover it mid-run.
	if c.Turns > 0 && c.Message.Max > 0 && c.Output.Max > 0 {
		worst := int64(c.Turns)*int64(c.Message.Max) + int64(c.Turns-1)*int64(c.Output.Max)
		if worst > MaxPromptTokens {
			errs = append(errs, fmt.Errorf("Turns*Message.Max + (Turns-1)*Output.Max must be <= %d, got %d",
				MaxPromptTokens, worst))
		}
	}
	return configError("sessions", errs...)
}

// turn is a session's next request waiting in the arrival queue.
type turn struct {
	req    Request // Tokens holds the conversation so far, including this turn's message
	number int     // 0-based turn index
}

// turnQueue orders pending turns by arrival, ties broken by session id so the order never depends
// on heap internals.
type turnQueue []turn

func (q turnQueue) Len() int { return len(q) }
func (q turnQueue) Less(i, j int) bool {
	if q[i].req.Arrival != q[j].req.Arrival {
		return q[i].req.Arrival < q[j].req.Arrival
	}
	return q[i].req.Session < q[j].req.Session
}
func (q turnQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *turnQueue) Push(x any)   { *q = append(*q, x.(turn)) }
func (q *turnQueue) Pop() any {
	old := *q
	t := old[len(old)-1]
	*q = old[:len(old)-1]
	return t
}

type sessions struct {
	cfg     SessionConfig
	seed    uint64
	rng     *rand.Rand
	clock   poissonClock
	queue   turnQueue
	started int
	n       int
}

// NewSessions returns the multi-turn Source. Only sessions that have started and not finished are
// held in memory; the next session is scheduled when the previous one starts.
func NewSessions(cfg SessionConfig, seed uint64) (Source, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rng := newRNG(seed)
	s := &sessions{cfg: cfg, seed: seed, rng: rng, clock: poissonClock{rng: rng, rate: cfg.Rate}}
	s.startNext()
	return s, nil
}

func (s *sessions) startNext() {
	if s.started >= s.cfg.Sessions {
		return
	}
	s.started++
	msg := s.cfg.Message.sample(s.rng)
	heap.Push(&s.queue, turn{req: Request{
		Arrival:   s.clock.next(),
		Tokens:    appendRandom(make([]uint32, 0, msg), s.rng, msg),
		MaxTokens: s.cfg.Output.sample(s.rng),
		Session:   uint64(s.started),
	}})
}

func (s *sessions) Next() (Request, bool) {
	if len(s.queue) == 0 {
		return Request{}, false
	}
	t := heap.Pop(&s.queue).(turn)
	if t.number == 0 {
		s.startNext()
	}
	s.n++
	out := t.req
	out.ID = uint64(s.n)
	if t.number+1 < s.cfg.Turns {
		s.pushFollowUp(t)
	}
	// The follow-up built its own slice, so the emitted Tokens are not aliased by the queue.
	return out, true
}

// pushFollowUp schedules the next turn: previous prompt + the previous turn's output
// (synthesized as a pure function of seed, session and turn) + a new message.
func (s *sessions) pushFollowUp(prev turn) {
	msg := s.cfg.Message.sample(s.rng)
	toks := make([]uint32, 0, len(prev.req.Tokens)+prev.req.MaxTokens+msg)
	toks = append(toks, prev.req.Tokens...)
	toks = appendOutput(toks, s.seed^prev.req.Session*splitmixGamma, uint64(prev.number), prev.req.MaxTokens)
	toks = appendRandom(toks, s.rng, msg)
	heap.Push(&s.queue, turn{number: prev.number + 1, req: Request{
		Arrival:   prev.req.Arrival + s.cfg.Think.sample(s.rng),
		Tokens:    toks,
		MaxTokens: s.cfg.Output.sample(s.rng),
		Session:   prev.req.Session,
	}})
}
