// Package clock is the only source of time for the routing core.
//
// Core packages never call time.Now, time.Sleep or time.After: they take a
// Clock. Live wiring passes Real; the simulator drives a Virtual clock from
// its event queue; tests step a Manual clock by hand.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once, d after Now.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer. C delivers the fire time once.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was pending.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now.
func (Real) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// Sleep waits d on c, or until done is closed. It reports whether the full
// duration elapsed. Adapters use it for backoff so tests can drive it with a
// Manual clock.
func Sleep(c Clock, d time.Duration, done <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-done:
		return false
	}
}

// stepped is the shared engine of Virtual and Manual: time moves only when
// told to, and timers fire in deadline order (ties in creation order).
type stepped struct {
	mu      sync.Mutex
	now     time.Time
	seq     uint64
	timers  []*steppedTimer
	waiters []chan struct{} // woken whenever a timer is created
}

type steppedTimer struct {
	owner    *stepped
	deadline time.Time
	seq      uint64
	ch       chan time.Time
}

func (t *steppedTimer) C() <-chan time.Time { return t.ch }

func (t *steppedTimer) Stop() bool {
	s := t.owner
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range s.timers {
		if p == t {
			s.timers = append(s.timers[:i], s.timers[i+1:]...)
			return true
		}
	}
	return false
}

func (s *stepped) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *stepped) NewTimer(d time.Duration) Timer {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	t := &steppedTimer{owner: s, deadline: s.now.Add(d), seq: s.seq, ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- s.now
		return t
	}
	s.timers = append(s.timers, t)
	sort.SliceStable(s.timers, func(i, j int) bool {
		a, b := s.timers[i], s.timers[j]
		if !a.deadline.Equal(b.deadline) {
			return a.deadline.Before(b.deadline)
		}
		return a.seq < b.seq
	})
	for _, w := range s.waiters {
		close(w)
	}
	s.waiters = nil
	return t
}

// advanceTo moves time to t (never backwards) and fires every due timer.
func (s *stepped) advanceTo(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.Before(s.now) {
		return
	}
	s.now = t
	i := 0
	for ; i < len(s.timers) && !s.timers[i].deadline.After(t); i++ {
		s.timers[i].ch <- s.timers[i].deadline
	}
	s.timers = s.timers[i:]
}

func (s *stepped) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.timers)
}

// Virtual is the simulator's clock: the event loop jumps it to the time of
// the next event with AdvanceTo, and asks for the earliest timer deadline.
type Virtual struct{ stepped }

// NewVirtual starts a virtual clock at start.
func NewVirtual(start time.Time) *Virtual { return &Virtual{stepped{now: start}} }

// AdvanceTo jumps to t, firing due timers. Going backwards is a no-op.
func (v *Virtual) AdvanceTo(t time.Time) { v.advanceTo(t) }

// NextDeadline reports the earliest pending timer deadline.
func (v *Virtual) NextDeadline() (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.timers) == 0 {
		return time.Time{}, false
	}
	return v.timers[0].deadline, true
}

// Manual is a test clock stepped by hand.
type Manual struct{ stepped }

// NewManual starts a manual clock at start.
func NewManual(start time.Time) *Manual { return &Manual{stepped{now: start}} }

// Advance moves the clock forward by d, firing due timers.
func (m *Manual) Advance(d time.Duration) { m.advanceTo(m.Now().Add(d)) }

// Set jumps to t (never backwards), firing due timers.
func (m *Manual) Set(t time.Time) { m.advanceTo(t) }

// Pending reports how many timers wait to fire.
func (m *Manual) Pending() int { return m.pending() }

// WaitForTimers blocks until at least n timers are pending or done closes;
// tests use it to know that a goroutine has started waiting on the clock.
func (m *Manual) WaitForTimers(n int, done <-chan struct{}) bool {
	for {
		m.mu.Lock()
		if len(m.timers) >= n {
			m.mu.Unlock()
			return true
		}
		w := make(chan struct{})
		m.waiters = append(m.waiters, w)
		m.mu.Unlock()
		select {
		case <-w:
		case <-done:
			return false
		}
	}
}
