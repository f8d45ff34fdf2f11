package gateway

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/discovery"
	"switchyard/router/metrics"
)

// outcomes collects what OnOutcome reports.
type outcomes struct {
	mu  sync.Mutex
	all []Outcome
}

func (o *outcomes) add(v Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all = append(o.all, v)
}

func (o *outcomes) list() []Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Outcome(nil), o.all...)
}

// one waits for the single outcome a request reports (the handler reports
// it as the pinned attempt ends, which can be just after the client has
// the answer).
func (o *outcomes) one(t *testing.T) Outcome {
	t.Helper()
	eventually(t, "an outcome", func() bool { return len(o.list()) > 0 })
	time.Sleep(20 * time.Millisecond)
	got := o.list()
	require.Len(t, got, 1, "one outcome per pinned request")
	return got[0]
}

func outcomeFixture(t *testing.T, shim *upstream, fallback bool, workers []*discovery.Worker, extra ...*upstream) (*fixture, *outcomes) {
	cfg := dynamoConfig([]string{shim.name}, backendFor(shim, clientModel))
	for _, u := range extra {
		cfg.Backends = append(cfg.Backends, backendFor(u, clientModel))
	}
	cfg.Backends[0].HealthCheck.Enabled = false
	cfg.DisaggregatedServing.FallbackToUnified = fallback
	got := &outcomes{}
	f := newFixture(t, cfg, workers, func(o *fixtureOptions) { o.onOutcome = got.add })
	return f, got
}

// Every pinned request reports one outcome with the picker's request id,
// its status, and its latencies: a buffered answer's TTFT is its E2E, a
// stream's is its first event's. The picker hears Finished, once.
func TestOutcomeOfServedRequests(t *testing.T) {
	t.Run("buffered", func(t *testing.T) {
		shim := newUpstream(t, "dyn-a")
		f, got := outcomeFixture(t, shim, false, pairWorkers(clientModel))
		body := `{"model":"` + clientModel + `","max_tokens":7,"messages":[{"role":"user","content":"Say hello"}]}`
		resp, b := f.post(pathChat, body, nil)
		require.Equal(t, 200, resp.StatusCode, string(b))
		o := got.one(t)
		req := f.picker.lastPick()
		assert.Equal(t, req.ID, o.RequestID)
		assert.Equal(t, 7, req.MaxTokens, "the picker request carries the output limit")
		assert.Equal(t, pathChat, req.Route)
		assert.Equal(t, OutcomeOK, o.Status)
		assert.Empty(t, o.Error)
		assert.Equal(t, pathChat, o.Route)
		assert.Equal(t, req.PromptTokens, o.PromptTokens)
		assert.Positive(t, o.E2E)
		assert.Equal(t, o.E2E, o.TTFT)
		assert.Equal(t, o.End.Sub(o.Start), o.E2E)
		assert.Equal(t, req.Now, o.Start)
		_, ended := f.picker.counts()
		assert.Equal(t, [2]int{1, 0}, [2]int{f.picker.finishedCount(), ended},
			"a delivered answer is reported finished, not ended: its worker stops counting it")
	})
	t.Run("streamed", func(t *testing.T) {
		shim := newUpstream(t, "dyn-a")
		shim.setRespond(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, chunk(true, clientModel, "first ", ""))
			time.Sleep(150 * time.Millisecond)
			writeEvent(w, chunk(true, clientModel, "last", "stop"))
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		})
		f, got := outcomeFixture(t, shim, false, pairWorkers(clientModel))
		resp, b := f.post(pathChat, chatBody(clientModel, true), nil)
		require.Equal(t, 200, resp.StatusCode, string(b))
		o := got.one(t)
		assert.Equal(t, OutcomeOK, o.Status)
		assert.Positive(t, o.TTFT)
		assert.GreaterOrEqual(t, o.E2E-o.TTFT, 140*time.Millisecond, "the first event went out before the second was sent")
		assert.Equal(t, 2, o.OutputTokens, "two events carried text; [DONE] did not")
		assert.GreaterOrEqual(t, o.ITL, 140*time.Millisecond)
		assert.Equal(t, 1, f.picker.finishedCount(), "a streamed answer finishes once its last event is out")
	})
	t.Run("streamed in pieces", func(t *testing.T) {
		// Events split across writes, several per write, one without
		// text (a finish chunk) and one too large to inspect.
		shim := newUpstream(t, "dyn-a")
		shim.setRespond(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.Header().Set("Content-Type", "text/event-stream")
			rc := http.NewResponseController(w)
			_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n"+`data: {"choices":[{"delta":{"cont`)
			_ = rc.Flush()
			_, _ = io.WriteString(w, `ent":"b"}}]}`+"\n")
			_ = rc.Flush()
			_, _ = io.WriteString(w, "\n"+`data: {"choices":[{"delta":{"content":""},"finish_reason":"stop"}]}`+"\n\n")
			_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"`+strings.Repeat("x", maxEventScan)+`"}}]}`+"\n\n")
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		})
		f, got := outcomeFixture(t, shim, false, pairWorkers(clientModel))
		resp, b := f.post(pathChat, chatBody(clientModel, true), nil)
		require.Equal(t, 200, resp.StatusCode, string(b))
		assert.Equal(t, 2, got.one(t).OutputTokens)
	})
	t.Run("not pinned", func(t *testing.T) {
		shim, vllm := newUpstream(t, "dyn-a"), newUpstream(t, "vllm")
		f, got := outcomeFixture(t, shim, false, nil, vllm)
		f.picker.refuse = true
		resp, b := f.post(pathChat, chatBody(clientModel, false), nil)
		require.Equal(t, 200, resp.StatusCode, "served unified: %s", b)
		time.Sleep(50 * time.Millisecond)
		assert.Empty(t, got.list(), "only pinned requests report an outcome")
	})
}

// Failures map to the recorder's statuses, once per request, before any
// unified fallback.
func TestOutcomeOfFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		respond  func(http.ResponseWriter, *http.Request, []byte)
		stream   bool
		fallback bool
		status   string
		firstB   bool // a body byte reached the client before the end
	}{
		{name: "5xx", respond: respondStatus(500, "boom"), status: OutcomeFailed},
		{name: "5xx with fallback", respond: respondStatus(500, "boom"), fallback: true, status: OutcomeFailed},
		{name: "refusal", respond: respondStatus(500, refusalText), status: OutcomeRefused},
		{name: "streamed 4xx", respond: respondStatus(422, "bad field"), stream: true, status: OutcomeRejected, firstB: true},
		{name: "buffered 4xx", respond: respondStatus(400, "bad field"), status: OutcomeRejected, firstB: true},
		{name: "broken stream", stream: true, status: OutcomeFailed, firstB: true, respond: func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, chunk(true, clientModel, "partial ", ""))
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shim, vllm := newUpstream(t, "dyn-a"), newUpstream(t, "vllm")
			shim.setRespond(tc.respond)
			f, got := outcomeFixture(t, shim, tc.fallback, pairWorkers(clientModel), vllm)
			resp, b := f.post(pathChat, chatBody(clientModel, tc.stream), http.Header{"X-Backend": {""}})
			if tc.fallback {
				require.Equal(t, 200, resp.StatusCode, string(b))
				require.Len(t, vllm.requests(), 1)
			}
			o := got.one(t)
			assert.Equal(t, tc.status, o.Status)
			assert.NotEmpty(t, o.Error)
			assert.Equal(t, f.picker.lastPick().ID, o.RequestID)
			assert.Positive(t, o.E2E)
			if tc.firstB {
				assert.Positive(t, o.TTFT)
			} else {
				assert.Zero(t, o.TTFT, "no byte had been written when the attempt ended")
			}
		})
	}
}

// A client that leaves mid-stream ends its request as cancelled.
func TestOutcomeOfACancelledStream(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	shim.setRespond(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, chunk(true, clientModel, "first ", ""))
		<-r.Context().Done()
	})
	f, got := outcomeFixture(t, shim, false, pairWorkers(clientModel))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+pathChat, strings.NewReader(chatBody(clientModel, true)))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	require.Contains(t, line, "first ")
	cancel()
	resp.Body.Close()
	o := got.one(t)
	assert.Equal(t, OutcomeCancelled, o.Status)
	assert.Equal(t, "the client left", o.Error)
	assert.Positive(t, o.TTFT)
}

// An OpenAI SDK hangs up as soon as it reads [DONE], which can be before
// the upstream closes its end: the stream was whole, so it counts as ok
// (not as a client that left), and nothing is written after [DONE].
func TestStreamEndsAtDone(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	release := make(chan struct{})
	shim.setRespond(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, chunk(true, clientModel, "hello", "stop"))
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		w.(http.Flusher).Flush()
		select { // the upstream lingers before closing
		case <-r.Context().Done():
		case <-release:
		}
	})
	f, got := outcomeFixture(t, shim, false, pairWorkers(clientModel))
	defer close(release)
	client := f.client()
	s := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: clientModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	n := 0
	for s.Next() {
		n++
	}
	require.NoError(t, s.Err())
	require.Equal(t, 1, n)
	o := got.one(t)
	assert.Equal(t, OutcomeOK, o.Status, o.Error)
	eventuallyCount(t, f, 1.0, "backend", "dyn-a", metrics.ResultOK)
	assert.Equal(t, 0.0, counter(t, f, "backend", "dyn-a", metrics.ResultCanceled))
	_, ended := f.picker.counts()
	assert.Zero(t, ended, "a whole answer is not ended unserved")
}

// The picker request names the ingress route and the output limit, for
// recordings, whatever dialect the client spoke.
func TestPickerRequestDescribesTheIngress(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	f, got := outcomeFixture(t, shim, false, pairWorkers(clientModel))
	for _, tc := range []struct {
		path, body string
		max        int
	}{
		{pathChat, `{"model":"` + clientModel + `","max_completion_tokens":12,"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, 12},
		{pathCompletion, `{"model":"` + clientModel + `","max_tokens":5,"prompt":"hi"}`, 5},
		{pathMessages, `{"model":"` + clientModel + `","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`, 9},
		{pathResponses, `{"model":"` + clientModel + `","max_output_tokens":11,"input":"hi"}`, 11},
		{pathChat, `{"model":"` + clientModel + `","max_tokens":"many","messages":[{"role":"user","content":"hi"}]}`, 0},
	} {
		resp, b := f.post(tc.path, tc.body, nil)
		require.Equal(t, 200, resp.StatusCode, "%s: %s", tc.path, b)
		req := f.picker.lastPick()
		assert.Equal(t, tc.path, req.Route)
		assert.Equal(t, tc.max, req.MaxTokens, tc.path)
	}
	eventually(t, "every outcome", func() bool { return len(got.list()) == 5 })
	for i, o := range got.list() {
		assert.Equal(t, OutcomeOK, o.Status, "%d: %s", i, o.Error)
	}
}
