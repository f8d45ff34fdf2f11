package gateway

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/discovery"
	"switchyard/router/metrics"
)

// dynamoBadRequest answers like a Dynamo frontend refusing a body: a 400
// in its own error shape, not OpenAI's.
func dynamoBadRequest(w http.ResponseWriter, _ *http.Request, _ []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write([]byte(`{"message":"missing field ` + "`messages`" + ` at line 1 column 20","type":"Bad Request","code":400}`))
}

// An upstream 4xx is the client's to see: its status and message, in the
// gateway's error shape, from the one replica that answered. It is not
// retried elsewhere, not a decode failure, not a fallback, and does not
// count toward the replica's breaker.
func TestUpstreamClientErrorReachesTheClient(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			a, b, vllm := newUpstream(t, "dyn-a"), newUpstream(t, "dyn-b"), newUpstream(t, "vllm")
			a.setRespond(dynamoBadRequest)
			b.setRespond(dynamoBadRequest)
			cfg := dynamoConfig([]string{"dyn-a", "dyn-b"}, backendFor(a, clientModel), backendFor(b, clientModel), backendFor(vllm, clientModel))
			cfg.DisaggregatedServing.FallbackToUnified = true
			cfg.Backends[0].CircuitBreaker.FailureThreshold = 1
			cfg.Backends[1].CircuitBreaker.FailureThreshold = 1
			f := newFixture(t, cfg, pairWorkers(clientModel))

			for range 3 {
				resp, body := f.post(pathChat, `{"model":"`+clientModel+`","stream":`+strconv.FormatBool(stream)+`}`, nil)
				require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
				e := jsonOf(t, body)["error"].(map[string]any)
				assert.Equal(t, "missing field `messages` at line 1 column 20", e["message"])
				assert.Equal(t, "invalid_request_error", e["type"])
				assert.Equal(t, codeUpstreamError, e["code"])
			}
			assert.Len(t, append(a.requests(), b.requests()...), 3, "one send per request, no retry on the other replica")
			assert.Empty(t, vllm.requests(), "no fallback")
			assert.Len(t, f.gw.st.Load().usableNamespaces(nil, f.gw.clock.Now()), 1, "the breakers stay closed")
			assert.Equal(t, 0.0, counter(t, f, "disagg_errors", metrics.PhaseDecode))
			eventuallyCount(t, f, 3.0, "http", metrics.RouteChatCompletions, "400")
		})
	}
}

// The Anthropic ingress answers an upstream 4xx in Anthropic's shape, and
// a unified backend's 4xx is reshaped like a frontend's.
func TestUpstreamClientErrorShapes(t *testing.T) {
	shim, vllm := newUpstream(t, "dyn-a"), newUpstream(t, "vllm")
	shim.setRespond(dynamoBadRequest)
	vllm.setRespond(dynamoBadRequest)
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel), backendFor(vllm, plainModel)),
		[]*discovery.Worker{worker("dynamo", aggID, discovery.RoleAggregated, clientModel)})

	resp, body := f.post(pathMessages, `{"model":"`+clientModel+`","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
	e := jsonOf(t, body)
	assert.Equal(t, "error", e["type"])
	assert.Contains(t, e["error"].(map[string]any)["message"], "missing field `messages`")
	assert.Equal(t, "invalid_request_error", e["error"].(map[string]any)["type"])

	resp, body = f.post(pathChat, chatBody(plainModel, false), nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
	assert.Equal(t, "missing field `messages` at line 1 column 20", jsonOf(t, body)["error"].(map[string]any)["message"])
}

// With no live worker in the fleet view (etcd unreachable, leases
// lapsed), nothing can be pinned: a model only shims serve is a 503 with
// Retry-After, and no unpinned request reaches a direct-mode frontend. A
// unified backend outside the pools still serves its models.
func TestEmptyFleetViewAnswers503(t *testing.T) {
	shim, vllm := newUpstream(t, "dyn-a"), newUpstream(t, "vllm")
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel), backendFor(vllm, plainModel)), nil)

	for _, path := range []string{pathChat, pathMessages, pathResponses} {
		body := `{"model":"` + clientModel + `","max_tokens":8,"input":"hi","messages":[{"role":"user","content":"hi"}]}`
		resp, b := f.post(path, body, nil)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s: %s", path, b)
		assert.Equal(t, "2", resp.Header.Get("Retry-After"), path)
		assert.Contains(t, string(b), codeNoBackend, path)
	}
	assert.Empty(t, shim.requests(), "no unpinned request reaches the direct-mode frontend")

	resp, b := f.post(pathChat, chatBody(plainModel, false), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Len(t, vllm.requests(), 1)
}
