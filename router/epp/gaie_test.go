package epp_test

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"
	gaie "sigs.k8s.io/gateway-api-inference-extension/test/integration"

	"switchyard/router/epp"
)

// The Inference Extension's own names for the protocol's keys are ours.
func TestProtocolKeysMatchTheInferenceExtension(t *testing.T) {
	require.Equal(t, metadata.DestinationEndpointNamespace, epp.LBNamespace)
	require.Equal(t, metadata.DestinationEndpointKey, epp.DestinationHeader)
	require.Equal(t, metadata.DestinationEndpointServedKey, epp.ServedKey)
	require.Equal(t, metadata.SubsetFilterNamespace, epp.SubsetHintNamespace)
	require.Equal(t, metadata.SubsetFilterKey, epp.SubsetHintKey)
}

// Requests built by the Inference Extension's integration-test builders
// (the messages its own endpoint picker is tested with) are routed: the
// streamed completions request, its buffered form, a subset hint in their
// metadata, a body split into chunks, and a request of headers only.
func TestInferenceExtensionRequestBuilders(t *testing.T) {
	log := logr.Discard()
	prompt := "the quick brown fox jumps over the lazy dog"

	h := newHarness(t, defaultSettings(), testTransports[:2]...)
	set, _, lb := routed(t, h.process(t, gaie.ReqLLM(log, prompt, testModel, "")...))
	require.Equal(t, "10.0.0.1:8000", lb)
	require.Equal(t, lb, set[epp.DestinationHeader])
	require.Equal(t, "33", set[epp.HeaderWorkerID])
	require.Empty(t, h.picks.balanced())

	// The subset hint as the builders write it: only the second worker.
	h = newHarness(t, defaultSettings(), testTransports[:2]...)
	h.process(t, gaie.ReqLLM(log, prompt, testModel, "")...) // round robin moves on to the second worker
	out := h.process(t, gaie.GenerateStreamedRequestSet(log, prompt, testModel, "", []string{"10.0.0.2:8000"})...)
	_, _, lb = routed(t, out)
	require.Equal(t, "10.0.0.2:8000", lb)
	out = h.process(t, gaie.GenerateStreamedRequestSet(log, prompt, testModel, "", []string{"192.0.2.1:8000"})...)
	require.Equal(t, 503, int(out[len(out)-1].GetImmediateResponse().GetStatus().GetCode()), "no worker in the subset")

	// A body split into chunks, and a streamed (stream: true) body.
	h = newHarness(t, defaultSettings(), testTransports[:2]...)
	body := `{"model":"` + testModel + `","prompt":"` + prompt + `","max_tokens":8}`
	_, _, lb = routed(t, h.process(t, gaie.ReqRaw(map[string]string{":path": "/v1/completions", ":method": "POST"},
		body[:10], body[10:25], body[25:])...))
	require.Equal(t, "10.0.0.1:8000", lb)
	_, _, lb = routed(t, h.process(t, gaie.ReqLLMWithStream(log, prompt, testModel, "")...))
	require.Equal(t, "10.0.0.2:8000", lb)

	// Headers only, for the configured model.
	st := defaultSettings()
	st.ModelName = testModel
	h = newHarness(t, st, testTransports[:2]...)
	_, _, lb = routed(t, h.process(t, gaie.ReqHeaderOnly(map[string]string{":path": "/v1/models", ":method": "GET"})...))
	require.Equal(t, "10.0.0.1:8000", lb)
	require.Empty(t, h.picks.balanced())
}
