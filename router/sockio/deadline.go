package sockio

import "time"

// maxLeeway caps how much later than asked a lenient deadline may fire.
const maxLeeway = time.Second

// Lenient is the deadline to set for an operation that must be allowed to
// run until want, given the deadline cur already set: cur itself (keep)
// when it falls no earlier than want and within a leeway after it, else
// want plus the leeway, so that the requests that follow can keep it.
// The leeway is a sixteenth of want's distance from now, at most a
// second: a connection serving hundreds of requests a second moves its
// deadline about once a second instead of for each one (each move is a
// clock read and a runtime timer update), and no deadline fires early.
// A zero want (no deadline) is kept exactly.
func Lenient(cur, want, now time.Time) (at time.Time, keep bool) {
	if want.IsZero() {
		return want, cur.IsZero()
	}
	leeway := min(want.Sub(now)/16, maxLeeway)
	if leeway < 0 {
		leeway = 0
	}
	if !cur.IsZero() && !cur.Before(want) && !cur.After(want.Add(leeway)) {
		return cur, true
	}
	return want.Add(leeway), false
}
