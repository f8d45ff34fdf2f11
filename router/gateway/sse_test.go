package gateway

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/discovery"
	"switchyard/router/metrics"
)

// endlessEvent streams "data: x" lines without ever ending the event
// with a blank line, until the reader goes away or cap bytes are out; it
// counts the bytes it got out.
func endlessEvent(written *atomic.Int64, cap int64) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		line := []byte("data: " + strings.Repeat("x", 250) + "\n")
		rc := http.NewResponseController(w)
		for written.Load() < cap {
			n, err := w.Write(line)
			written.Add(int64(n))
			if err != nil {
				return
			}
			if written.Load()%(1<<20) < int64(len(line)) {
				_ = rc.Flush()
			}
		}
	}
}

// A backend stream whose event never ends is cut once the event passes
// maxHeldEvent, whether it comes as one line or many: the client gets an
// error event, the gateway stops reading (so holds at most about that
// much), and the attempt counts as a broken stream.
func TestEndlessEventIsCut(t *testing.T) {
	for _, path := range []string{pathChat, pathMessages} {
		t.Run(path, func(t *testing.T) {
			const cap = 64 << 20
			var written atomic.Int64
			shim := newUpstream(t, "dyn-a")
			shim.setRespond(endlessEvent(&written, cap))
			logs := &captureHandler{}
			f := newFixture(t, dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel)),
				[]*discovery.Worker{worker("dynamo", aggID, discovery.RoleAggregated, clientModel)}, withLog(logs))

			resp, body := f.post(path, `{"model":"`+clientModel+`","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Less(t, len(body), 4<<10, "nothing of the oversized event reaches the client")
			assert.True(t, strings.Contains(string(body), codeEventTooLarge), "the stream ends with the error")
			assert.Less(t, written.Load(), int64(16<<20), "the gateway stopped reading soon after the cap")
			eventuallyCount(t, f, 1.0, "backend", "dyn-a", metrics.ResultStreamError)
			eventually(t, "the log line", func() bool { return len(logs.warnings()) == 1 })
			assert.Equal(t, codeEventTooLarge, logs.warnings()[0].attrs["code"])
		})
	}
}

// One line longer than maxHeldEvent is cut the same way.
func TestOverlongLineIsCut(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	shim.setRespond(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, chunk(true, clientModel, "first ", ""))
		_, _ = io.WriteString(w, "data: "+strings.Repeat("y", maxHeldEvent+1)+"\n\n")
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel)),
		[]*discovery.Worker{worker("dynamo", aggID, discovery.RoleAggregated, clientModel)})
	resp, body := f.post(pathChat, chatBody(clientModel, true), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), "first ")
	assert.Contains(t, string(body), codeEventTooLarge)
	assert.NotContains(t, string(body), "yyyy")
	assert.NotContains(t, string(body), "[DONE]")
}
