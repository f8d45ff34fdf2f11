// Package sim runs the routing core in virtual time. Its heart is a
// discrete-event queue: events ordered by (time, sequence), where the
// sequence is the order of scheduling, so two events at the same instant
// always run in the same order and a run is reproducible byte for byte.
package sim

import (
	"time"

	"switchyard/router/clock"
)

// Action is what happens when an event fires. It may schedule more events.
type Action func(now time.Time)

// item times are nanoseconds since the loop's start: integer compares,
// and no pointer besides the action for the collector to scan.
type item struct {
	at         int64
	seq        uint64
	run        Action
	background bool
}

// items is a binary min-heap by (at, seq). Hand-written rather than
// container/heap, whose interface boxes every pushed and popped item.
type items []item

func (q items) less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}

func (q *items) push(it item) {
	*q = append(*q, it)
	h := *q
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (q *items) pop() item {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = item{} // drop the action reference
	h = h[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(h) && h.less(l, small) {
			small = l
		}
		if r := l + 1; r < len(h) && h.less(r, small) {
			small = r
		}
		if small == i {
			break
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
	*q = h
	return top
}

// Loop is the event loop of one run: a queue and the virtual clock it
// drives. Not safe for concurrent use; a run is single-threaded.
type Loop struct {
	Clock *clock.Virtual
	start time.Time
	q     items
	seq   uint64
	fired uint64
	// foreground counts scheduled events that are not Background: Run
	// stops when none is left.
	foreground int
}

// NewLoop starts a loop with its clock at start.
func NewLoop(start time.Time) *Loop { return &Loop{Clock: clock.NewVirtual(start), start: start} }

// At schedules run at t; a time in the past runs at the current time.
func (l *Loop) At(t time.Time, run Action) {
	l.foreground++
	l.schedule(t, run, false)
}

// Background schedules run at t as a timer that keeps no run alive: Run
// ends when only background events are left, so a timer set for later
// (the routing core's staleness rule) neither runs past the workload nor
// stretches the simulated time.
func (l *Loop) Background(t time.Time, run Action) { l.schedule(t, run, true) }

func (l *Loop) schedule(t time.Time, run Action, background bool) {
	if now := l.Clock.Now(); t.Before(now) {
		t = now
	}
	l.seq++
	l.q.push(item{at: int64(t.Sub(l.start)), seq: l.seq, run: run, background: background})
}

// After schedules run d after the current time.
func (l *Loop) After(d time.Duration, run Action) { l.At(l.Clock.Now().Add(d), run) }

// Pending is the number of scheduled events.
func (l *Loop) Pending() int { return len(l.q) }

// Fired is the number of events run so far.
func (l *Loop) Fired() uint64 { return l.fired }

// Step runs the next event, jumping the clock to its time; false when the
// queue is empty.
func (l *Loop) Step() bool {
	if len(l.q) == 0 {
		return false
	}
	it := l.q.pop()
	if !it.background {
		l.foreground--
	}
	at := l.start.Add(time.Duration(it.at))
	l.Clock.AdvanceTo(at)
	l.fired++
	it.run(at)
	return true
}

// RunUntil runs events up to and including end (or until the queue is
// empty), then leaves the clock at end if it got there.
func (l *Loop) RunUntil(end time.Time) {
	for horizon := int64(end.Sub(l.start)); len(l.q) > 0 && l.q[0].at <= horizon; {
		l.Step()
	}
	l.Clock.AdvanceTo(end)
}

// Run runs until no foreground event is left.
func (l *Loop) Run() {
	for l.foreground > 0 && l.Step() {
	}
}
