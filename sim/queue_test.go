package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestEventsRunInTimeThenSchedulingOrder(t *testing.T) {
	l := NewLoop(t0)
	var got []string
	note := func(s string) Action {
		return func(now time.Time) { got = append(got, fmt.Sprintf("%s@%v", s, now.Sub(t0))) }
	}
	l.After(2*time.Second, note("c"))
	l.After(time.Second, note("a"))
	l.After(time.Second, note("b")) // same instant: scheduling order
	l.After(time.Second, func(now time.Time) {
		got = append(got, "d@1s")
		l.After(0, note("e")) // scheduled while running: after everything already due at this instant
	})
	l.At(t0.Add(-time.Hour), note("past")) // never runs before now
	l.Run()
	require.Equal(t, []string{"past@0s", "a@1s", "b@1s", "d@1s", "e@1s", "c@2s"}, got)
	require.Equal(t, uint64(6), l.Fired())
	require.Equal(t, t0.Add(2*time.Second), l.Clock.Now())
}

func TestRunUntilStopsAtTheHorizon(t *testing.T) {
	l := NewLoop(t0)
	n := 0
	var tick Action
	tick = func(time.Time) {
		n++
		l.After(100*time.Millisecond, tick)
	}
	l.At(t0, tick)
	l.RunUntil(t0.Add(time.Second))
	require.Equal(t, 11, n, "ticks at 0, 100ms, ..., 1s")
	require.Equal(t, t0.Add(time.Second), l.Clock.Now())
	require.Equal(t, 1, l.Pending())
}

// The virtual clock's timers fire as the loop moves time, so code written
// against clock.Clock runs unchanged inside a simulation.
func TestClockTimersFollowTheLoop(t *testing.T) {
	l := NewLoop(t0)
	timer := l.Clock.NewTimer(1500 * time.Millisecond)
	l.After(time.Second, func(time.Time) {})
	l.After(2*time.Second, func(time.Time) {})
	l.Step()
	select {
	case <-timer.C():
		t.Fatal("fired early")
	default:
	}
	l.Step()
	require.Equal(t, t0.Add(1500*time.Millisecond), <-timer.C())
}

func BenchmarkLoop(b *testing.B) {
	l := NewLoop(t0)
	noop := func(time.Time) {}
	for i := 0; i < 1024; i++ {
		l.After(time.Duration(i)*time.Millisecond, noop)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.Step()
		l.After(time.Second, noop)
	}
}
