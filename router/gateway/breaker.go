package gateway

import (
	"sync"
	"time"
)

// verdict is what one finished attempt says about its backend.
type verdict int

const (
	// neutral: nothing learned (the client left, or the answer was about
	// the request rather than the backend, like a direct-mode refusal).
	neutral verdict = iota
	success
	failure
)

// breaker is a per-backend circuit breaker. Closed, it counts consecutive
// failures; at the threshold it opens and refuses attempts for openFor.
// After that one trial attempt is let through (half-open): a success
// closes the breaker, a failure opens it for another openFor. Time comes
// from the caller, so tests step it.
type breaker struct {
	threshold int
	openFor   time.Duration
	// onChange is told when the breaker opens (true) or closes (false).
	onChange func(open bool)

	mu        sync.Mutex
	failures  int
	openUntil time.Time // zero while closed
	trial     bool      // the half-open trial is in flight
}

func newBreaker(threshold int, openFor time.Duration, onChange func(bool)) *breaker {
	if threshold < 1 {
		threshold = 1
	}
	if onChange == nil {
		onChange = func(bool) {}
	}
	return &breaker{threshold: threshold, openFor: openFor, onChange: onChange}
}

// ready reports, without taking anything, whether an attempt could start:
// used to decide which backends count as usable.
func (b *breaker) ready(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.openUntil.IsZero() || (!now.Before(b.openUntil) && !b.trial)
}

// allow starts an attempt. trial reports that it is the half-open trial,
// whose verdict decides the breaker's state; it must be passed to done.
func (b *breaker) allow(now time.Time) (trial, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.openUntil.IsZero():
		return false, true
	case now.Before(b.openUntil) || b.trial:
		return false, false
	}
	b.trial = true
	return true, true
}

// done records an attempt's verdict.
func (b *breaker) done(trial bool, v verdict, now time.Time) {
	b.mu.Lock()
	changed, open := false, false
	switch {
	case v == success:
		changed = !b.openUntil.IsZero()
		b.failures, b.openUntil, b.trial = 0, time.Time{}, false
	case v == failure && trial:
		b.openUntil, b.trial = now.Add(b.openFor), false
	case v == failure && b.openUntil.IsZero():
		b.failures++
		if b.failures >= b.threshold {
			b.failures, b.openUntil = 0, now.Add(b.openFor)
			changed, open = true, true
		}
	case trial:
		b.trial = false // no verdict: let the next attempt be the trial
	}
	b.mu.Unlock()
	if changed {
		b.onChange(open)
	}
}
