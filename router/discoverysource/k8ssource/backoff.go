package k8ssource

import "time"

// backoff is the delay between passes. It doubles on every ended pass up to
// max and returns to initial after a watch that stayed open for at least
// resetAfter = min(max, the watch's server-side timeout): a watch that
// lives out its routine close is a healthy session, while resetting on mere
// success would let an API server that lists but drops watches at once
// drive relists at the floor rate.
type backoff struct {
	initial, max, resetAfter time.Duration
	// cur is the last delay handed out; 0 before the first.
	cur time.Duration
}

func newBackoff(initial, ceiling, watchTimeout time.Duration) backoff {
	if initial <= 0 {
		initial = DefaultBackoffInitial
	}
	if ceiling <= 0 {
		ceiling = DefaultBackoffMax
	}
	ceiling = max(ceiling, initial)
	return backoff{initial: initial, max: ceiling, resetAfter: min(ceiling, watchTimeout)}
}

// next returns the delay before the next pass. openFor is how long the
// ended pass's watch stayed open, 0 if it never opened.
func (b *backoff) next(openFor time.Duration) time.Duration {
	switch {
	case b.cur == 0 || openFor >= b.resetAfter:
		b.cur = b.initial
	default:
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}
