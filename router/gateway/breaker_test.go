package gateway

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBreakerLifecycle(t *testing.T) {
	var changes []bool
	b := newBreaker(3, 30*time.Second, func(open bool) { changes = append(changes, open) })
	t0 := time.Unix(1000, 0)

	// Failures interrupted by a success never add up.
	for range 2 {
		b.done(false, failure, t0)
	}
	b.done(false, success, t0)
	for range 2 {
		b.done(false, failure, t0)
	}
	require.True(t, b.ready(t0))
	b.done(false, neutral, t0) // a client leaving says nothing
	require.True(t, b.ready(t0))

	b.done(false, failure, t0) // the third in a row
	assert.Equal(t, []bool{true}, changes)
	assert.False(t, b.ready(t0))
	_, ok := b.allow(t0.Add(29 * time.Second))
	assert.False(t, ok, "open")

	// Half-open: one trial at a time.
	t1 := t0.Add(30 * time.Second)
	assert.True(t, b.ready(t1))
	trial, ok := b.allow(t1)
	require.True(t, ok)
	require.True(t, trial)
	assert.False(t, b.ready(t1), "the trial is in flight")
	_, ok = b.allow(t1)
	assert.False(t, ok)

	// A trial without a verdict frees the slot; a failed one reopens.
	b.done(true, neutral, t1)
	trial, ok = b.allow(t1)
	require.True(t, ok && trial)
	b.done(true, failure, t1)
	_, ok = b.allow(t1.Add(29 * time.Second))
	assert.False(t, ok, "reopened for another open_for")

	t2 := t1.Add(30 * time.Second)
	trial, ok = b.allow(t2)
	require.True(t, ok && trial)
	b.done(true, success, t2)
	assert.Equal(t, []bool{true, false}, changes)
	trial, ok = b.allow(t2)
	assert.True(t, ok)
	assert.False(t, trial, "closed: no trial")

	// Late failures of attempts begun before the breaker opened do not
	// extend the open period.
	for range 3 {
		b.done(false, failure, t2)
	}
	b.done(false, failure, t2.Add(20*time.Second))
	assert.True(t, b.ready(t2.Add(30*time.Second)))
}
