package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/metrics"
)

// The exact text a Dynamo 1.5 direct-mode frontend answers (dynamo-wire §8.1).
const refusalText = "Prefill worker ID required in Direct routing mode but none found in request. Expected prefill_worker_id to be set via x-dynamo-prefill-instance-id header by external router (e.g., EPP)."

func pairWorkers(model string) []*discovery.Worker {
	return []*discovery.Worker{
		worker("dynamo", prefillID, discovery.RolePrefill, model),
		worker("dynamo", decodeID, discovery.RoleDecode, model),
	}
}

// A direct-mode refusal is a 503 with its own code, counted as an
// orchestration error; no other replica, pair or fallback is tried, even
// with fallback_to_unified on. Buffered and streaming alike (the refusal
// comes as an error head, before any event).
func TestDirectModeRefusal(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			a, b, vllm := newUpstream(t, "dyn-a"), newUpstream(t, "dyn-b"), newUpstream(t, "vllm")
			for _, u := range []*upstream{a, b} {
				u.setRespond(respondStatus(http.StatusInternalServerError, refusalText))
			}
			cfg := dynamoConfig([]string{"dyn-a", "dyn-b"}, backendFor(a, clientModel), backendFor(b, clientModel), backendFor(vllm, clientModel))
			cfg.DisaggregatedServing.FallbackToUnified = true
			f := newFixture(t, cfg, pairWorkers(clientModel))

			resp, body := f.post(pathChat, chatBody(clientModel, stream), http.Header{"X-Backend": {""}})
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			assert.Equal(t, "disaggregated_prefill_decode_unavailable", errorCode(t, body))
			assert.Equal(t, "dyn-a", resp.Header.Get(hdrDiscloseBackend))
			assert.Len(t, a.requests(), 1)
			assert.Empty(t, b.requests(), "no other replica")
			assert.Empty(t, vllm.requests(), "no fallback")
			picks, ended := f.picker.counts()
			assert.Equal(t, 1, picks, "no second pair")
			assert.Equal(t, 1, ended)
			eventuallyCount(t, f, 1.0, "disagg_errors", metrics.PhaseOrchestration)
			assert.Equal(t, 0.0, counter(t, f, "disagg_errors", metrics.PhaseDecode))
			eventuallyCount(t, f, 1.0, "routing_path", metrics.PathDisaggregated)
			assert.Equal(t, 0.0, counter(t, f, "routing_path", metrics.PathFallback))
		})
	}
}

// Any other shim failure of a buffered request is a decode failure: a 502
// without fallback_to_unified, a pin-free unified answer with it.
func TestShimFailureBuffered(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
	}{{"5xx", 500}, {"bad gateway", 502}, {"429", 429}, {"408", 408}} {
		t.Run(tc.name+" without fallback", func(t *testing.T) {
			shim, vllm := newUpstream(t, "dyn-a"), newUpstream(t, "vllm")
			shim.setRespond(respondStatus(tc.status, "engine exploded"))
			f := newFixture(t, dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel), backendFor(vllm, clientModel)), pairWorkers(clientModel))
			resp, body := f.post(pathChat, chatBody(clientModel, false), nil)
			assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
			assert.Equal(t, "disaggregated_decode_failed", errorCode(t, body))
			assert.Empty(t, vllm.requests())
			_, ended := f.picker.counts()
			assert.Equal(t, 1, ended)
			eventuallyCount(t, f, 1.0, "disagg_errors", metrics.PhaseDecode)
			eventuallyCount(t, f, 1.0, "routing_path", metrics.PathDisaggregated)
		})
		t.Run(tc.name+" with fallback", func(t *testing.T) {
			shim, vllm := newUpstream(t, "dyn-a"), newUpstream(t, "vllm")
			shim.setRespond(respondStatus(tc.status, "engine exploded"))
			cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel), backendFor(vllm, clientModel))
			cfg.DisaggregatedServing.FallbackToUnified = true
			f := newFixture(t, cfg, pairWorkers(clientModel))
			resp, body := f.post(pathChat, chatBody(clientModel, false), http.Header{"X-Backend": {""}})
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			assert.Contains(t, string(body), "hello from vllm")
			require.Len(t, vllm.requests(), 1)
			assert.Empty(t, dynamoHeaders(vllm.requests()[0].Header), "the fallback carries no instance ids")
			assert.Equal(t, "vllm", resp.Header.Get(hdrDiscloseBackend))
			assert.Empty(t, resp.Header.Get(hdrDiscloseWorkerID), "the failed pair is not disclosed")
			assert.Empty(t, resp.Header.Get(hdrDisclosePrefillID))
			assert.Len(t, shim.requests(), 1, "the shim is not a fallback target")
			eventuallyCount(t, f, 1.0, "disagg_errors", metrics.PhaseDecode)
			eventuallyCount(t, f, 1.0, "routing_path", metrics.PathFallback)
			assert.Equal(t, 0.0, counter(t, f, "routing_path", metrics.PathDisaggregated), "counted once per request")
		})
	}
}

// A fallback needs a unified backend outside the shim pools.
func TestFallbackWithoutUnifiedBackend(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	shim.setRespond(respondStatus(500, "boom"))
	cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel))
	cfg.DisaggregatedServing.FallbackToUnified = true
	f := newFixture(t, cfg, pairWorkers(clientModel))
	resp, body := f.post(pathChat, chatBody(clientModel, false), nil)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Equal(t, "disaggregated_decode_failed", errorCode(t, body))
	assert.Len(t, shim.requests(), 1)
}

// On streams too, only transport failures, 5xx, 429 and 408 fall back;
// other 4xx are the client's and reach it with their status and message.
func TestShimFailureStreaming(t *testing.T) {
	for _, tc := range []struct {
		status   int
		fallback bool
	}{{400, false}, {404, false}, {422, false}, {408, true}, {429, true}, {500, true}, {503, true}} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			shim, vllm := newUpstream(t, "dyn-a"), newUpstream(t, "vllm")
			shim.setRespond(respondStatus(tc.status, "upstream says no"))
			cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel), backendFor(vllm, clientModel))
			cfg.DisaggregatedServing.FallbackToUnified = true
			f := newFixture(t, cfg, pairWorkers(clientModel))
			resp, body := f.post(pathChat, chatBody(clientModel, true), nil)
			_, ended := f.picker.counts()
			assert.Equal(t, 1, ended)
			if tc.fallback {
				require.Equal(t, 200, resp.StatusCode, string(body))
				assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
				assert.Contains(t, string(body), "vllm")
				assert.Len(t, vllm.requests(), 1)
				eventuallyCount(t, f, 1.0, "disagg_errors", metrics.PhaseDecode)
				eventuallyCount(t, f, 1.0, "routing_path", metrics.PathFallback)
				return
			}
			assert.Equal(t, tc.status, resp.StatusCode)
			assert.JSONEq(t, string(errorJSON(tc.status, "upstream", "upstream says no")), string(body), "status, code and message kept")
			assert.Empty(t, vllm.requests())
			assert.Empty(t, dynamoHeaders(resp.Header))
			assert.Equal(t, 0.0, counter(t, f, "disagg_errors", metrics.PhaseDecode))
			eventuallyCount(t, f, 1.0, "routing_path", metrics.PathDisaggregated)
		})
	}
}

// A refused connection moves to the next replica of the pool with the
// very same pins; the picker is not asked again.
func TestConnectionRefusedRetriesOnAnotherReplica(t *testing.T) {
	live := newUpstream(t, "dyn-live")
	dead := config.DefaultBackend()
	dead.Name, dead.URL, dead.Models = "dyn-dead", deadURL(t), []string{clientModel}
	dead.HealthCheck.Enabled = false // the request, not a probe, must find it down
	workers := []*discovery.Worker{
		withDP(worker("dynamo", prefillID, discovery.RolePrefill, clientModel), 0),
		withDP(worker("dynamo", decodeID, discovery.RoleDecode, clientModel), 4),
	}
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			f := newFixture(t, dynamoConfig([]string{"dyn-dead", "dyn-live"}, dead, backendFor(live, clientModel)), workers)
			before := len(live.requests())
			resp, body := f.post(pathChat, chatBody(clientModel, stream), http.Header{"X-Backend": {""}})
			require.Equal(t, 200, resp.StatusCode, string(body))
			assert.Equal(t, "dyn-live", resp.Header.Get(hdrDiscloseBackend))
			got := live.requests()[before:]
			require.Len(t, got, 1)
			assert.Equal(t, map[string]string{
				"x-dynamo-worker-instance-id":  strconv.FormatUint(decodeID, 10),
				"x-dynamo-dp-rank":             "4",
				"x-dynamo-prefill-instance-id": strconv.FormatUint(prefillID, 10),
				"x-dynamo-prefill-dp-rank":     "0",
			}, dynamoHeaders(got[0].Header))
			picks, ended := f.picker.counts()
			assert.Equal(t, 1, picks, "workers are never re-selected")
			assert.Zero(t, ended)
			eventuallyCount(t, f, 1.0, "backend", "dyn-dead", metrics.ResultConnectError)
			eventuallyCount(t, f, 1.0, "backend", "dyn-live", metrics.ResultOK)
			assert.Equal(t, 0.0, counter(t, f, "disagg_errors", metrics.PhaseDecode))
		})
	}
	t.Run("no retries left", func(t *testing.T) {
		cfg := dynamoConfig([]string{"dyn-dead", "dyn-live"}, dead, backendFor(live, clientModel))
		cfg.Gateway.Retries = 0
		f := newFixture(t, cfg, workers)
		before := len(live.requests())
		resp, body := f.post(pathChat, chatBody(clientModel, false), nil)
		assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
		assert.Equal(t, "disaggregated_decode_failed", errorCode(t, body))
		assert.Len(t, live.requests(), before)
		_, ended := f.picker.counts()
		assert.Equal(t, 1, ended)
	})
	t.Run("pre-stream transport failure falls back", func(t *testing.T) {
		vllm := newUpstream(t, "vllm")
		cfg := dynamoConfig([]string{"dyn-dead"}, dead, backendFor(vllm, clientModel))
		cfg.DisaggregatedServing.FallbackToUnified = true
		f := newFixture(t, cfg, workers)
		resp, body := f.post(pathChat, chatBody(clientModel, true), nil)
		require.Equal(t, 200, resp.StatusCode, string(body))
		assert.Contains(t, string(body), `"content":"vllm"`)
		eventuallyCount(t, f, 1.0, "routing_path", metrics.PathFallback)
	})
}

// A unified request that cannot connect anywhere is a 502; the retry
// budget bounds how many backends it tries.
func TestUnifiedConnectFailures(t *testing.T) {
	var backends []config.Backend
	for i := range 3 {
		b := config.DefaultBackend()
		b.Name, b.URL, b.Models = "dead-"+strconv.Itoa(i), deadURL(t), []string{plainModel}
		b.HealthCheck.Enabled = false
		backends = append(backends, b)
	}
	cfg := dynamoConfig(nil, backends...)
	cfg.Gateway.Retries = 1
	f := newFixture(t, cfg, nil)
	resp, body := f.post(pathChat, chatBody(plainModel, false), nil)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Equal(t, "upstream_unavailable", errorCode(t, body))
	eventuallyCount(t, f, 1.0, "backend", "dead-0", metrics.ResultConnectError)
	eventuallyCount(t, f, 1.0, "backend", "dead-1", metrics.ResultConnectError)
	assert.Equal(t, 0.0, counter(t, f, "backend", "dead-2", metrics.ResultConnectError), "1 + retries attempts")
}

// A stream that breaks after its head ends with an OpenAI error event, and
// the picker hears that the pinned request ended.
func TestMidStreamFailure(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	shim.setRespond(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, chunk(true, clientModel, "partial ", ""))
		_, _ = io.WriteString(w, "data: {\"half an") // an unfinished event
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})
	cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel))
	cfg.Backends[0].HealthCheck.Enabled = false
	f := newFixture(t, cfg, pairWorkers(clientModel))
	resp, body := f.post(pathChat, chatBody(clientModel, true), nil)
	require.Equal(t, 200, resp.StatusCode)
	events := strings.Split(strings.TrimSpace(string(body)), "\n\n")
	require.Len(t, events, 2, string(body))
	assert.Contains(t, events[0], "partial ")
	assert.Equal(t, "data: "+string(errorJSON(502, codeStreamBroken, "the backend's stream broke off")), events[1], "no half event before the error")
	_, ended := f.picker.counts()
	assert.Equal(t, 1, ended)
	eventuallyCount(t, f, 1.0, "backend", "dyn-a", metrics.ResultStreamError)
}

// The breaker opens after failure_threshold consecutive failures, refuses
// until open_for passes, then lets one trial through, whose success closes it.
func TestBreakerOpensAndRecovers(t *testing.T) {
	vllm := newUpstream(t, "vllm")
	vllm.setRespond(respondStatus(500, "down"))
	b := backendFor(vllm, plainModel)
	b.HealthCheck.Enabled = false
	b.CircuitBreaker = config.CircuitBreaker{FailureThreshold: 3, OpenFor: config.Duration(30 * time.Second)}
	clk := newManualClock()
	f := newFixture(t, dynamoConfig(nil, b), nil, func(o *fixtureOptions) { o.clock = clk })

	for range 3 {
		resp, _ := f.post(pathChat, chatBody(plainModel, false), nil)
		assert.Equal(t, 500, resp.StatusCode, "upstream errors are relayed")
	}
	resp, body := f.post(pathChat, chatBody(plainModel, false), nil)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "no_available_backend", errorCode(t, body))
	assert.Len(t, vllm.requests(), 3, "an open breaker sends nothing")

	vllm.setRespond(nil) // the backend recovers
	clk.Advance(29 * time.Second)
	resp, _ = f.post(pathChat, chatBody(plainModel, false), nil)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "still open")
	clk.Advance(time.Second)
	resp, body = f.post(pathChat, chatBody(plainModel, false), nil)
	require.Equal(t, 200, resp.StatusCode, string(body), "the trial goes through")
	for range 5 {
		resp, _ = f.post(pathChat, chatBody(plainModel, false), nil)
		assert.Equal(t, 200, resp.StatusCode, "closed again")
	}
	assert.Len(t, vllm.requests(), 9)
}

// An open breaker takes a shim replica out of the namespaces the picker
// is offered, like an unhealthy one.
func TestOpenBreakerHidesShimNamespace(t *testing.T) {
	shim, vllm := newUpstream(t, "dyn-a"), newUpstream(t, "vllm")
	shim.setRespond(respondStatus(500, "down"))
	b := backendFor(shim, clientModel)
	b.CircuitBreaker.FailureThreshold = 1
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, b, backendFor(vllm, clientModel)), pairWorkers(clientModel))
	resp, _ := f.post(pathChat, chatBody(clientModel, false), nil)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	resp, body := f.post(pathChat, chatBody(clientModel, false), nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	assert.Contains(t, string(body), "hello from vllm")
	picks, _ := f.picker.counts()
	assert.Equal(t, 1, picks, "no usable replica: the picker is not run")
	eventuallyCount(t, f, 1.0, "routing_path", metrics.PathUnified)
}

// Failing probes take a backend out of rotation; passing ones bring it back.
func TestUnhealthyBackendIsSkipped(t *testing.T) {
	a, b := newUpstream(t, "a"), newUpstream(t, "b")
	a.health.Store(http.StatusServiceUnavailable)
	probe := func(u *upstream) config.Backend {
		c := backendFor(u, plainModel)
		c.HealthCheck.Interval = config.Duration(100 * time.Millisecond)
		c.HealthCheck.Timeout = config.Duration(100 * time.Millisecond)
		c.HealthCheck.UnhealthyThreshold = 2
		return c
	}
	f := newFixture(t, dynamoConfig(nil, probe(a), probe(b)), nil)
	eventually(t, "a to turn unhealthy", func() bool { return counter(t, f, "healthy", "a") == 0 })
	eventuallyCount(t, f, 1.0, "healthy", "b")
	for range 4 {
		resp, body := f.post(pathChat, chatBody(plainModel, false), nil)
		require.Equal(t, 200, resp.StatusCode)
		assert.Contains(t, string(body), "hello from b")
	}
	assert.Empty(t, a.requests())

	a.health.Store(http.StatusOK)
	eventually(t, "a to recover", func() bool { return counter(t, f, "healthy", "a") == 1 })
	for range 4 {
		f.post(pathChat, chatBody(plainModel, false), nil)
	}
	assert.NotEmpty(t, a.requests())

	// Every backend down: a 503 that names no backend.
	a.health.Store(500)
	b.health.Store(500)
	eventually(t, "both down", func() bool { return counter(t, f, "healthy", "a")+counter(t, f, "healthy", "b") == 0 })
	resp, body := f.post(pathChat, chatBody(plainModel, false), nil)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "no_available_backend", errorCode(t, body))
}

// An unhealthy shim replica leaves its namespace out; with the only
// replica down, a Dynamo-only model is unavailable rather than unknown.
func TestUnhealthyShimReplica(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	shim.health.Store(500)
	b := backendFor(shim)
	b.HealthCheck.Interval = config.Duration(100 * time.Millisecond)
	b.HealthCheck.Timeout = config.Duration(100 * time.Millisecond)
	b.HealthCheck.UnhealthyThreshold = 1
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, b), pairWorkers(dynamoModel))
	eventually(t, "the shim to turn unhealthy", func() bool { return counter(t, f, "healthy", "dyn-a") == 0 })
	resp, body := f.post(pathChat, chatBody(dynamoModel, false), nil)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "no_available_backend", errorCode(t, body))
	picks, _ := f.picker.counts()
	assert.Zero(t, picks)
	assert.Empty(t, shim.requests())
}

// Bodies over gateway.max_body_bytes are refused with 413, whether the
// client declares the length or streams it chunked.
func TestBodyOverLimit(t *testing.T) {
	vllm := newUpstream(t, "vllm")
	cfg := dynamoConfig(nil, backendFor(vllm, plainModel))
	cfg.Gateway.MaxBodyBytes = 1024
	f := newFixture(t, cfg, nil)
	big := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, plainModel, strings.Repeat("x", 2048))

	resp, body := f.post(pathChat, big, nil)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	assert.Equal(t, "request_too_large", errorCode(t, body))

	req, err := http.NewRequest(http.MethodPost, f.srv.URL+pathChat, io.MultiReader(strings.NewReader(big))) // unknown length: chunked
	require.NoError(t, err)
	req.ContentLength = -1
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	assert.Equal(t, "request_too_large", errorCode(t, body))
	assert.Empty(t, vllm.requests())
	eventuallyCount(t, f, 2.0, "http", metrics.RouteChatCompletions, "413")

	resp, _ = f.post(pathChat, chatBody(plainModel, false), nil)
	assert.Equal(t, 200, resp.StatusCode, "a body under the limit passes")
}

// A client that goes away cancels the shim's request, buffered or
// streaming, and the picker hears the pinned request ended.
func TestClientCancelPropagates(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			shim := newUpstream(t, "dyn-a")
			upstreamGone := make(chan struct{})
			started := make(chan struct{})
			shim.setRespond(func(w http.ResponseWriter, r *http.Request, _ []byte) {
				if stream {
					w.Header().Set("Content-Type", "text/event-stream")
					writeEvent(w, chunk(true, clientModel, "first ", ""))
				}
				close(started)
				select {
				case <-r.Context().Done():
					close(upstreamGone)
				case <-time.After(10 * time.Second):
				}
			})
			cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel))
			f := newFixture(t, cfg, pairWorkers(clientModel))

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+pathChat, strings.NewReader(chatBody(clientModel, stream)))
			done := make(chan struct{})
			go func() {
				defer close(done)
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					if stream {
						line, _ := bufio.NewReader(resp.Body).ReadString('\n')
						assert.Contains(t, line, "first ")
					}
					cancel()
					resp.Body.Close()
				}
			}()
			<-started
			if !stream {
				cancel()
			}
			select {
			case <-upstreamGone:
			case <-time.After(5 * time.Second):
				t.Fatal("the shim's request context was not cancelled")
			}
			<-done
			eventually(t, "the picker to hear the request ended", func() bool { _, e := f.picker.counts(); return e == 1 })
			eventually(t, "the cancellation to be counted", func() bool {
				return counter(t, f, "backend", "dyn-a", metrics.ResultCanceled) == 1
			})
			assert.Equal(t, 0.0, counter(t, f, "disagg_errors", metrics.PhaseDecode), "a client leaving is not a decode failure")
		})
	}
}

// gateway.request_timeout ends a request with a 504; a backend's own
// timeout is a failure of that backend.
func TestTimeouts(t *testing.T) {
	slow := func(u *upstream) {
		u.setRespond(func(w http.ResponseWriter, r *http.Request, _ []byte) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		})
	}
	t.Run("request timeout", func(t *testing.T) {
		vllm := newUpstream(t, "vllm")
		slow(vllm)
		cfg := dynamoConfig(nil, backendFor(vllm, plainModel))
		cfg.Gateway.RequestTimeout = config.Duration(200 * time.Millisecond) // the backend's own is 300s
		f := newFixture(t, cfg, nil)
		resp, body := f.post(pathChat, chatBody(plainModel, false), nil)
		assert.Equal(t, http.StatusGatewayTimeout, resp.StatusCode)
		assert.Equal(t, "request_timeout", errorCode(t, body))
	})
	t.Run("request timeout, stream", func(t *testing.T) {
		vllm := newUpstream(t, "vllm")
		vllm.setRespond(func(w http.ResponseWriter, r *http.Request, _ []byte) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; ; i++ { // never idle, never done
				writeEvent(w, chunk(true, plainModel, strconv.Itoa(i), ""))
				select {
				case <-r.Context().Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
		cfg := dynamoConfig(nil, backendFor(vllm, plainModel))
		cfg.Gateway.RequestTimeout = config.Duration(300 * time.Millisecond)
		f := newFixture(t, cfg, nil)
		resp, body := f.post(pathChat, chatBody(plainModel, true), nil)
		require.Equal(t, 200, resp.StatusCode)
		require.Contains(t, string(body), "data: ", "events flowed before the deadline")
		eventuallyCount(t, f, 1.0, "backend", "vllm", metrics.ResultCanceled)
	})
	t.Run("backend timeout, unified", func(t *testing.T) {
		vllm := newUpstream(t, "vllm")
		slow(vllm)
		b := backendFor(vllm, plainModel)
		b.Timeout = config.Duration(200 * time.Millisecond)
		f := newFixture(t, dynamoConfig(nil, b), nil)
		resp, body := f.post(pathChat, chatBody(plainModel, false), nil)
		assert.Equal(t, http.StatusGatewayTimeout, resp.StatusCode)
		assert.Equal(t, "upstream_timeout", errorCode(t, body))
		eventuallyCount(t, f, 1.0, "backend", "vllm", metrics.ResultTimeout)
	})
	t.Run("backend timeout, net/http client", func(t *testing.T) {
		vllm := newUpstream(t, "vllm")
		slow(vllm)
		b := backendFor(vllm, plainModel)
		b.Timeout = config.Duration(200 * time.Millisecond)
		cfg := dynamoConfig(nil, b)
		cfg.Gateway.UpstreamClient = config.UpstreamClientNetHTTP
		f := newFixture(t, cfg, nil)
		resp, body := f.post(pathChat, chatBody(plainModel, false), nil)
		assert.Equal(t, http.StatusGatewayTimeout, resp.StatusCode)
		assert.Equal(t, "upstream_timeout", errorCode(t, body))
		eventuallyCount(t, f, 1.0, "backend", "vllm", metrics.ResultTimeout)
	})
	t.Run("backend timeout, pinned", func(t *testing.T) {
		shim := newUpstream(t, "dyn-a")
		slow(shim)
		b := backendFor(shim, clientModel)
		b.Timeout = config.Duration(200 * time.Millisecond)
		f := newFixture(t, dynamoConfig([]string{"dyn-a"}, b), pairWorkers(clientModel))
		resp, body := f.post(pathChat, chatBody(clientModel, false), nil)
		assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
		assert.Equal(t, "disaggregated_decode_failed", errorCode(t, body))
		eventuallyCount(t, f, 1.0, "disagg_errors", metrics.PhaseDecode)
	})
	t.Run("stream idle timeout", func(t *testing.T) {
		vllm := newUpstream(t, "vllm")
		vllm.setRespond(func(w http.ResponseWriter, r *http.Request, _ []byte) {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 { // events 100ms apart keep a 300ms idle timeout happy
				writeEvent(w, chunk(true, plainModel, strconv.Itoa(i), ""))
				time.Sleep(100 * time.Millisecond)
			}
			<-r.Context().Done() // then silence
		})
		b := backendFor(vllm, plainModel)
		b.Timeout = config.Duration(300 * time.Millisecond)
		f := newFixture(t, dynamoConfig(nil, b), nil)
		resp, body := f.post(pathChat, chatBody(plainModel, true), nil)
		require.Equal(t, 200, resp.StatusCode)
		events := strings.Split(strings.TrimSpace(string(body)), "\n\n")
		require.Len(t, events, 4, string(body))
		assert.Contains(t, events[3], codeUpstreamTimeout)
		eventuallyCount(t, f, 1.0, "backend", "vllm", metrics.ResultTimeout)
	})
}

// API keys: bearer required, allowed_backends narrow both unified routing
// and the shim pools the picker is offered, and the models list.
func TestAPIKeys(t *testing.T) {
	shim, vllm, other := newUpstream(t, "dyn-a"), newUpstream(t, "vllm"), newUpstream(t, "other")
	cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel), backendFor(vllm, clientModel), backendFor(other, plainModel))
	cfg.APIKeys = []config.APIKey{
		{Key: "team-a-0123456789abcdef", AllowedBackends: []string{"vllm"}},
		{Key: "ops-0123456789abcdefghij"},
	}
	f := newFixture(t, cfg, pairWorkers(clientModel))
	bearer := func(k string) http.Header { return http.Header{"Authorization": {"Bearer " + k}} }

	resp, body := f.post(pathChat, chatBody(clientModel, false), nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Equal(t, "invalid_api_key", errorCode(t, body))
	assert.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
	resp, _ = f.post(pathChat, chatBody(clientModel, false), bearer("nope"))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = f.get(pathModels, nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// team-a may use vllm only: no shim namespace is offered, so the
	// picker is not asked, and the request goes to vllm unpinned.
	resp, body = f.post(pathChat, chatBody(clientModel, false), bearer("team-a-0123456789abcdef"))
	require.Equal(t, 200, resp.StatusCode, string(body))
	assert.Contains(t, string(body), "hello from vllm")
	picks, _ := f.picker.counts()
	assert.Zero(t, picks)
	resp, body = f.post(pathChat, chatBody(plainModel, false), bearer("team-a-0123456789abcdef"))
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "a model only other backends serve does not exist for this key")
	assert.Equal(t, "model_not_found", errorCode(t, body))
	_, body = f.get(pathModels, bearer("team-a-0123456789abcdef"))
	assert.JSONEq(t, `{"object":"list","data":[{"id":"qwen3-32b","object":"model","created":0,"owned_by":"switchyard"}]}`, string(body))

	// ops may use everything, so the shim pins its request.
	resp, body = f.post(pathChat, chatBody(clientModel, false), bearer("ops-0123456789abcdefghij"))
	require.Equal(t, 200, resp.StatusCode, string(body))
	assert.Contains(t, string(body), "hello from dyn-a")
	assert.Empty(t, shim.requests()[0].Header.Get("Authorization"), "the gateway key is not forwarded")
	resp, body = f.post(pathChat, chatBody(plainModel, false), bearer("ops-0123456789abcdefghij"))
	require.Equal(t, 200, resp.StatusCode, string(body))
}

// Malformed requests get OpenAI-shaped 4xx answers before any routing.
func TestClientErrors(t *testing.T) {
	vllm := newUpstream(t, "vllm")
	f := newFixture(t, dynamoConfig(nil, backendFor(vllm, plainModel)), nil)
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"not json", `{"model":`, 400, "invalid_request"},
		{"not an object", `["model"]`, 400, "invalid_request"},
		{"null", `null`, 400, "invalid_request"},
		{"no model", `{"messages":[]}`, 400, "invalid_request"},
		{"model not a string", `{"model":7}`, 400, "invalid_request"},
		{"blank model", `{"model":"  "}`, 400, "invalid_request"},
		{"model key is case-sensitive", `{"Model":"llama-3-8b"}`, 400, "invalid_request"},
		{"stream not a bool", `{"model":"llama-3-8b","stream":"yes"}`, 400, "invalid_request"},
		{"unknown model", `{"model":"gpt-17"}`, 404, "model_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.post(pathChat, tc.body, nil)
			assert.Equal(t, tc.status, resp.StatusCode)
			assert.Equal(t, tc.code, errorCode(t, body))
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		})
	}
	resp, body := f.get(pathChat, nil)
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "method_not_allowed", errorCode(t, body))
	assert.Equal(t, "POST", resp.Header.Get("Allow"))
	resp, body = f.get("/v1/embeddings", nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, "not_found", errorCode(t, body))
	assert.Empty(t, vllm.requests())
	eventuallyCount(t, f, 1.0, "http", metrics.RouteOther, "404")
}
