package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/metrics"
)

func refusedCount(f *fixture, reason string) float64 {
	return testutil.ToFloat64(f.metrics.Gateway.Refused.WithLabelValues(reason))
}

// Past gateway.max_in_flight running inference requests, the next is a
// 503 with Retry-After, in its route's dialect, before its body is read;
// once one ends, requests are taken again.
func TestMaxInFlight(t *testing.T) {
	vllm, arrived, release := heldUpstream(t)
	cfg := dynamoConfig(nil, backendFor(vllm, plainModel))
	cfg.Gateway.MaxInFlight = 1
	f := newFixture(t, cfg, nil)

	done := make(chan int)
	go func() {
		resp, _ := f.post(pathChat, chatBody(plainModel, false), nil)
		done <- resp.StatusCode
	}()
	<-arrived

	resp, body := f.post(pathChat, chatBody(plainModel, false), nil)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, codeOverloaded, errorCode(t, body))
	assert.Equal(t, "2", resp.Header.Get("Retry-After"))
	resp, body = f.post(pathMessages, `{"model":"`+plainModel+`","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "error", jsonOf(t, body)["type"], "Anthropic's shape on its route")
	resp, _ = f.get(pathModels, nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the models list is not an inference request")

	close(release)
	require.Equal(t, http.StatusOK, <-done)
	resp, body = f.post(pathChat, chatBody(plainModel, false), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	eventually(t, "the count", func() bool { return refusedCount(f, metrics.RefusedOverloaded) == 2 })
}

// Bodies past a bound or naming a routing member twice are 400s, counted
// by reason, and never reach a backend.
func TestRefusedBodiesAreCounted(t *testing.T) {
	vllm := newUpstream(t, "vllm")
	f := newFixture(t, dynamoConfig(nil, backendFor(vllm, plainModel)), nil)

	many := `{"model":"` + plainModel + `","messages":[` + strings.TrimSuffix(strings.Repeat(`{},`, maxMessages+1), ",") + `]}`
	resp, body := f.post(pathChat, many, nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(body), "more than 4096 messages")

	resp, body = f.post(pathChat, `{"model":"`+plainModel+`","nvext":{},"nvext":{"backend_instance_id":1}}`, nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(body), "more than once")

	manyBlocks := `{"model":"` + plainModel + `","max_tokens":8,"messages":[{"role":"user","content":[` +
		strings.TrimSuffix(strings.Repeat(`{"type":"text","text":"a"},`, maxBlocks+1), ",") + `]}]}`
	resp, _ = f.post(pathMessages, manyBlocks, nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)

	assert.Empty(t, vllm.requests())
	eventually(t, "the counts", func() bool {
		return refusedCount(f, metrics.RefusedBounds) == 2 && refusedCount(f, metrics.RefusedDuplicateKey) == 1
	})
}

// Request bodies held at once share gateway.max_buffered_body_bytes: a
// body that does not fit beside the ones held is refused with 503, and
// the bytes come back when the holder's answer ends.
func TestBufferedBodyBudget(t *testing.T) {
	vllm, arrived, release := heldUpstream(t)
	cfg := dynamoConfig(nil, backendFor(vllm, plainModel))
	cfg.Gateway.MaxBodyBytes = 32 << 10
	cfg.Gateway.MaxBufferedBodyBytes = 48 << 10
	f := newFixture(t, cfg, nil)
	// A 24 KiB body: one fits the 48 KiB budget beside another, not two.
	big := `{"model":"` + plainModel + `","messages":[{"role":"user","content":"` + strings.Repeat("a", 24<<10) + `"}]}`

	done := make(chan int)
	go func() {
		resp, _ := f.post(pathChat, big, nil)
		done <- resp.StatusCode
	}()
	<-arrived

	resp, body := f.post(pathChat, big, nil)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
	assert.Equal(t, codeOverloaded, errorCode(t, body))
	assert.Equal(t, "2", resp.Header.Get("Retry-After"))

	close(release)
	require.Equal(t, http.StatusOK, <-done)
	resp, body = f.post(pathChat, big, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the first body's bytes came back: %s", body)
	assert.Zero(t, f.gw.bodies.held.Load(), "every byte given back")
}

// heldUpstream answers nothing until release is closed; arrived hears of
// the first request to reach it.
func heldUpstream(t *testing.T) (up *upstream, arrived, release chan struct{}) {
	up = newUpstream(t, "vllm")
	arrived, release = make(chan struct{}, 1), make(chan struct{})
	up.setRespond(func(w http.ResponseWriter, r *http.Request, body []byte) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-release
		answer(w, r, body, "slow")
	})
	return up, arrived, release
}
