package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/router/clock"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// run is one Generate call in the background.
type run struct {
	tokens   chan string
	finished chan struct{}
	res      Result
	err      error
	cancel   context.CancelFunc
}

func start(w *Worker, req Request) *run {
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{tokens: make(chan string, 4096), finished: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(r.finished)
		r.res, r.err = w.Generate(ctx, req, func(s string) error { r.tokens <- s; return nil })
	}()
	return r
}

// wait returns once the run has ended.
func (r *run) wait(t *testing.T) (Result, error) {
	t.Helper()
	select {
	case <-r.finished:
		return r.res, r.err
	case <-time.After(5 * time.Second):
		t.Fatal("request did not end")
		return Result{}, nil
	}
}

func (r *run) isFinished() bool {
	select {
	case <-r.finished:
		return true
	default:
		return false
	}
}

// waitTimers blocks until n timers wait on m: the goroutines under test
// have reached their next wait.
func waitTimers(t *testing.T, m *clock.Manual, n int) {
	t.Helper()
	stop := make(chan struct{})
	tm := time.AfterFunc(5*time.Second, func() { close(stop) })
	defer tm.Stop()
	require.True(t, m.WaitForTimers(n, stop), "no goroutine started waiting")
}

// finish moves time on through exactly waits clock waits of r (its
// prefill chunks and decode steps), then waits for r to end. Counting the
// waits keeps it from firing timers of requests that start after r.
func finish(t *testing.T, m *clock.Manual, r *run, waits int) (Result, error) {
	t.Helper()
	for range waits {
		waitTimers(t, m, 1)
		m.Advance(time.Second)
	}
	return r.wait(t)
}

// drive moves time on until every run ended, for runs whose relative
// progress does not matter.
func drive(t *testing.T, m *clock.Manual, runs ...*run) {
	t.Helper()
	all := make(chan struct{})
	go func() {
		for _, r := range runs {
			<-r.finished
		}
		close(all)
	}()
	for m.WaitForTimers(1, all) {
		m.Advance(time.Second)
	}
	for _, r := range runs {
		_, err := r.wait(t)
		require.NoError(t, err)
	}
}

// eventually polls cond, for states reached without a clock wait (a
// request joining a queue).
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 5*time.Second, 100*time.Microsecond, msg)
}

// queued and running read a rank's scheduler state.
func queued(w *Worker, r uint32) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ranks[r].queue)
}

func running(w *Worker, r uint32) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ranks[r].running
}

func noTokens(t *testing.T, r *run) {
	t.Helper()
	select {
	case tok := <-r.tokens:
		t.Fatalf("unexpected token %q", tok)
	default:
	}
}
