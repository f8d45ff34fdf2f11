package k8ssource

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBackoffDoublesAndResetsAfterALongWatch(t *testing.T) {
	b := newBackoff(500*time.Millisecond, 30*time.Second, watchTimeout)
	assert.Equal(t, 30*time.Second, b.resetAfter, "min(max, 290 s)")
	var got []time.Duration
	for range 8 {
		got = append(got, b.next(0))
	}
	assert.Equal(t, []time.Duration{
		500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second,
		8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second,
	}, got)
	assert.Equal(t, 30*time.Second, b.next(29*time.Second), "a shorter session does not reset")
	assert.Equal(t, 500*time.Millisecond, b.next(30*time.Second), "a session of max resets")
}

// With a max above the watch's server-side timeout, a watch that lives to
// its routine close (290 s) resets the backoff.
func TestBackoffResetsAfterARoutineClose(t *testing.T) {
	b := newBackoff(time.Second, 10*time.Minute, watchTimeout)
	assert.Equal(t, watchTimeout, b.resetAfter)
	b.next(0)
	b.next(0)
	assert.Equal(t, time.Second, b.next(watchTimeout))
	end := passEnd{closed: true, openFor: watchTimeout}
	assert.True(t, end.routine(b.resetAfter))
	assert.False(t, passEnd{closed: false, openFor: watchTimeout}.routine(b.resetAfter), "an idle end is not routine")
	assert.False(t, passEnd{closed: true, openFor: time.Second}.routine(b.resetAfter), "an early close is not routine")
}
