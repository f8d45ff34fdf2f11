package httpd

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newRequestContext() *requestContext {
	return &requestContext{parent: context.Background()}
}

// Watch and AfterFunc keep context.AfterFunc's contract: a callback runs
// once the context ends (at once if it has), unless stopped first, and
// stopping reports whether it kept the callback from running.
func TestWatchKeepsAfterFuncsContract(t *testing.T) {
	c := newRequestContext()
	got := make(chan string, 8)
	kept := c.Watch(func() { got <- "kept" })
	dropped := c.Watch(func() { got <- "dropped" })
	stop := c.AfterFunc(func() { got <- "after" })
	require.NotEqual(t, kept, dropped)
	require.True(t, c.Unwatch(dropped))
	require.False(t, c.Unwatch(dropped), "a second stop keeps nothing more from running")
	c.cancel()
	var ranFuncs []string
	for range 2 {
		select {
		case v := <-got:
			ranFuncs = append(ranFuncs, v)
		case <-time.After(5 * time.Second):
			t.Fatalf("only %v ran", ranFuncs)
		}
	}
	require.ElementsMatch(t, []string{"kept", "after"}, ranFuncs)
	require.False(t, stop(), "it ran")
	require.False(t, c.Unwatch(kept), "it ran")
	require.Equal(t, context.Canceled, c.Err())
	require.Empty(t, got, "the unwatched callback never runs")

	late := make(chan struct{})
	key := c.Watch(func() { close(late) })
	select {
	case <-late:
	case <-time.After(5 * time.Second):
		t.Fatal("a watch on an ended context did not run")
	}
	require.False(t, c.Unwatch(key))
}

// A registration per exchange costs no allocation once the context's
// first slots exist.
func TestWatchDoesNotAllocate(t *testing.T) {
	c := newRequestContext()
	f := func() {}
	allocs := testing.AllocsPerRun(1000, func() {
		if !c.Unwatch(c.Watch(f)) {
			t.Fatal("not unwatched")
		}
	})
	require.Zero(t, allocs)
}
