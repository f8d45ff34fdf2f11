package sockio

import (
	"testing"
	"time"
)

// A lenient deadline never falls before what was asked, nor more than
// the leeway after it; it is kept while that holds, and moved otherwise.
func TestLenient(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	minute := now.Add(time.Minute)
	for _, tc := range []struct {
		name string
		cur  time.Time
		want time.Time
		at   time.Time
		keep bool
	}{
		{"none set yet", time.Time{}, minute, minute.Add(time.Second), false},
		{"set a little later: kept", minute.Add(300 * time.Millisecond), minute, minute.Add(300 * time.Millisecond), true},
		{"set exactly: kept", minute, minute, minute, true},
		{"set earlier: moved", minute.Add(-time.Millisecond), minute, minute.Add(time.Second), false},
		{"set much later: moved", minute.Add(2 * time.Second), minute, minute.Add(time.Second), false},
		{"short timeout: a sixteenth", time.Time{}, now.Add(160 * time.Millisecond), now.Add(170 * time.Millisecond), false},
		{"already past: exact", time.Time{}, now.Add(-time.Second), now.Add(-time.Second), false},
		{"no deadline wanted, none set", time.Time{}, time.Time{}, time.Time{}, true},
		{"no deadline wanted, one set", minute, time.Time{}, time.Time{}, false},
	} {
		at, keep := Lenient(tc.cur, tc.want, now)
		if !at.Equal(tc.at) || keep != tc.keep {
			t.Errorf("%s: Lenient = %v, %v; want %v, %v", tc.name, at.Sub(now), keep, tc.at.Sub(now), tc.keep)
		}
	}
}
