package gateway

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A pinned request's first token reaches the pinner once: for a stream,
// when the shim's first bytes arrive, while the answer is still being
// generated; for a buffered answer, at its response headers. Both come
// before the request is reported finished.
func TestFirstTokenIsReportedOnce(t *testing.T) {
	t.Run("streamed", func(t *testing.T) {
		shim := newUpstream(t, "dyn-a")
		release := make(chan struct{})
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		shim.setRespond(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, chunk(true, clientModel, "first ", ""))
			<-release
			writeEvent(w, chunk(true, clientModel, "last", "stop"))
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		})
		f, _ := outcomeFixture(t, shim, false, pairWorkers(clientModel))
		// Registered after the servers' cleanups, so it runs before them:
		// a failure below must not leave the shim blocked.
		t.Cleanup(free)
		done := make(chan int)
		go func() {
			resp, _ := f.post(pathChat, chatBody(clientModel, true), nil)
			done <- resp.StatusCode
		}()
		require.Eventually(t, func() bool { return len(f.picker.eventList()) > 0 }, 10*time.Second, time.Millisecond)
		require.Equal(t, []string{"first_token"}, f.picker.eventList(), "the first token is reported while the stream goes on")
		free()
		require.Equal(t, 200, <-done)
		require.Equal(t, []string{"first_token", "finished"}, f.picker.eventList())
	})
	t.Run("buffered", func(t *testing.T) {
		shim := newUpstream(t, "dyn-a")
		f, _ := outcomeFixture(t, shim, false, pairWorkers(clientModel))
		resp, b := f.post(pathChat, chatBody(clientModel, false), nil)
		require.Equal(t, 200, resp.StatusCode, string(b))
		require.Equal(t, []string{"first_token", "finished"}, f.picker.eventList())
	})
	t.Run("refused", func(t *testing.T) {
		shim := newUpstream(t, "dyn-a")
		shim.setRespond(respondStatus(http.StatusBadRequest, "no"))
		f, _ := outcomeFixture(t, shim, false, pairWorkers(clientModel))
		resp, _ := f.post(pathChat, chatBody(clientModel, false), nil)
		require.Equal(t, 400, resp.StatusCode)
		require.Empty(t, f.picker.eventList(), "an answer that is not a success has no first token")
	})
}
