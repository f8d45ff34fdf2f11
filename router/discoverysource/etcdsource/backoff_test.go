package etcdsource

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	const ms = time.Millisecond
	type step struct {
		openFor time.Duration // how long the ended pass kept all watches open
		want    time.Duration
	}
	for _, tc := range []struct {
		name         string
		initial, max time.Duration
		steps        []step
	}{
		{
			name: "doubles up to max", initial: 500 * ms, max: 3 * time.Second,
			steps: []step{{0, 500 * ms}, {0, time.Second}, {0, 2 * time.Second}, {0, 3 * time.Second}, {0, 3 * time.Second}},
		},
		{
			name: "short-lived watches do not reset", initial: 100 * ms, max: time.Second,
			steps: []step{{0, 100 * ms}, {999 * ms, 200 * ms}, {500 * ms, 400 * ms}, {time.Second - 1, 800 * ms}, {10 * ms, time.Second}},
		},
		{
			name: "watches open for max reset to initial", initial: 100 * ms, max: time.Second,
			steps: []step{{0, 100 * ms}, {0, 200 * ms}, {0, 400 * ms}, {time.Second, 100 * ms}, {0, 200 * ms}, {time.Hour, 100 * ms}},
		},
		{
			name: "zero config uses defaults", initial: 0, max: 0,
			steps: []step{{0, DefaultBackoffInitial}, {0, 2 * DefaultBackoffInitial}, {DefaultBackoffMax, DefaultBackoffInitial}},
		},
		{
			name: "max below initial is raised to initial", initial: time.Second, max: 10 * ms,
			steps: []step{{0, time.Second}, {0, time.Second}},
		},
		{
			name: "doubling never overshoots an odd max", initial: 3 * ms, max: 10 * ms,
			steps: []step{{0, 3 * ms}, {0, 6 * ms}, {0, 10 * ms}, {0, 10 * ms}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackoff(tc.initial, tc.max)
			for i, s := range tc.steps {
				if got := b.next(s.openFor); got != s.want {
					t.Fatalf("step %d (open %v): delay %v, want %v", i, s.openFor, got, s.want)
				}
			}
		})
	}
}
