// Package sim runs the routing core in virtual time. Its heart is a
// discrete-event queue: events ordered by (time, sequence), where the
// sequence is the order of scheduling, so two events at the same instant
// always run in the same order and a run is reproducible byte for byte.
package sim

import (
	"container/heap"
	"time"

	"switchyard/router/clock"
)

// Action is what happens when an event fires. It may schedule more events.
type Action func(now time.Time)

type item struct {
	at  time.Time
	seq uint64
	run Action
}

type items []item

func (q items) Len() int { return len(q) }
func (q items) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q items) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *items) Push(x any)   { *q = append(*q, x.(item)) }
func (q *items) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}

// Loop is the event loop of one run: a queue and the virtual clock it
// drives. Not safe for concurrent use; a run is single-threaded.
type Loop struct {
	Clock *clock.Virtual
	q     items
	seq   uint64
	fired uint64
}

// NewLoop starts a loop with its clock at start.
func NewLoop(start time.Time) *Loop { return &Loop{Clock: clock.NewVirtual(start)} }

// At schedules run at t; a time in the past runs at the current time.
func (l *Loop) At(t time.Time, run Action) {
	if now := l.Clock.Now(); t.Before(now) {
		t = now
	}
	l.seq++
	heap.Push(&l.q, item{at: t, seq: l.seq, run: run})
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
	it := heap.Pop(&l.q).(item)
	l.Clock.AdvanceTo(it.at)
	l.fired++
	it.run(it.at)
	return true
}

// RunUntil runs events up to and including end (or until the queue is
// empty), then leaves the clock at end if it got there.
func (l *Loop) RunUntil(end time.Time) {
	for len(l.q) > 0 && !l.q[0].at.After(end) {
		l.Step()
	}
	l.Clock.AdvanceTo(end)
}

// Run runs until no event is left.
func (l *Loop) Run() {
	for l.Step() {
	}
}
