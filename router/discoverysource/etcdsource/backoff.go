package etcdsource

import "time"

// Defaults for a zero Config.BackoffInitial / BackoffMax, as in the seed's
// watch_reconnect_backoff example.
const (
	DefaultBackoffInitial = 500 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second
)

// backoff is the delay between passes. It doubles on every ended pass up
// to max and returns to initial only after a pass whose watches all stayed
// open for at least max. Resetting on mere success would let an etcd proxy
// that answers range gets but drops watch streams at once drive reconnects
// at the floor rate.
type backoff struct {
	initial, max time.Duration
	// cur is the last delay handed out; 0 before the first.
	cur time.Duration
}

func newBackoff(initial, max time.Duration) backoff {
	if initial <= 0 {
		initial = DefaultBackoffInitial
	}
	if max <= 0 {
		max = DefaultBackoffMax
	}
	if max < initial {
		max = initial
	}
	return backoff{initial: initial, max: max}
}

// next returns the delay before the next pass. openFor is how long all
// watches of the ended pass stayed open, 0 if they never all opened.
func (b *backoff) next(openFor time.Duration) time.Duration {
	switch {
	case b.cur == 0 || openFor >= b.max:
		b.cur = b.initial
	case b.cur > b.max/2:
		b.cur = b.max
	default:
		b.cur *= 2
	}
	return b.cur
}
