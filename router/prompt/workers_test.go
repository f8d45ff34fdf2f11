package prompt

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/router/picker"
)

func (s *Service) workerCount() int {
	s.renderers.mu.Lock()
	defer s.renderers.mu.Unlock()
	return s.renderers.workers
}

// Renders one after another share one worker goroutine, which keeps the
// stack the last render grew.
func TestRendersReuseAWorker(t *testing.T) {
	s, c, _ := newService(t, funcRenderer(echo), Limits{Permits: 4})
	for range 50 {
		_, why := s.Tokens(context.Background(), "m", true, []byte(`{"messages":[]}`))
		require.Empty(t, why)
	}
	require.Equal(t, 50, c.get("ok"))
	require.Equal(t, 1, s.workerCount())
}

// A render whose caller gave up (the client went away) keeps its worker
// until it returns; the worker then serves the next render.
func TestAbandonedWorkerComesBack(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	blocking := funcRenderer(func(_ context.Context, messages []byte) (string, error) {
		if string(messages) == `[{"role":"user","content":"block"}]` {
			entered <- struct{}{}
			<-release
		}
		return string(messages), nil
	})
	s, _, _ := newService(t, blocking, Limits{Permits: 1, PermitWait: time.Millisecond, Deadline: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string)
	go func() {
		_, why := s.Tokens(ctx, "m", true, []byte(`{"messages":[{"role":"user","content":"block"}]}`))
		done <- why
	}()
	<-entered
	cancel()
	require.Equal(t, picker.KVRenderUnavailable, <-done)
	_, why := s.Tokens(context.Background(), "m", true, []byte(`{"messages":[]}`))
	require.Equal(t, picker.KVRenderUnavailable, why, "the only worker is still held")

	close(release)
	require.Eventually(t, func() bool {
		_, why := s.Tokens(context.Background(), "m", true, []byte(`{"messages":[]}`))
		return why == ""
	}, 10*time.Second, time.Millisecond, "the worker is back once its render returned")
	require.Equal(t, 1, s.workerCount())
}

// After Close no worker runs, and a render is refused rather than waited
// for.
func TestClosedServiceRendersNothing(t *testing.T) {
	s, _, _ := newService(t, funcRenderer(echo), Limits{Deadline: time.Minute})
	_, why := s.Tokens(context.Background(), "m", true, []byte(`{"messages":[]}`))
	require.Empty(t, why)
	s.Close()
	require.Eventually(t, func() bool { return s.workerCount() == 0 }, 10*time.Second, time.Millisecond)
	start := time.Now()
	_, why = s.Tokens(context.Background(), "m", true, []byte(`{"messages":[]}`))
	require.Equal(t, picker.KVRenderUnavailable, why)
	require.Less(t, time.Since(start), 30*time.Second, "refused, not left to the deadline")
	s.Close() // twice is harmless
}
