package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/metrics"
)

// nativeResponse is what a Responses-speaking backend answers.
func nativeResponse(model, text string) map[string]any {
	return map[string]any{"id": "resp_native", "object": "response", "created_at": 1, "status": "completed", "model": model,
		"output": []any{map[string]any{"id": "msg_native", "type": "message", "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}},
		"usage": map[string]any{"input_tokens": 4, "output_tokens": 2, "total_tokens": 6}}
}

// respondNative answers /v1/responses natively, chat as usual.
func respondNative(w http.ResponseWriter, r *http.Request, body []byte) {
	if r.URL.Path != pathResponses {
		answer(w, r, body, "chat answer")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(nativeResponse(clientModel, "native hello"))
}

// convertedBackend is a backend with responses_api: converted.
func convertedBackend(u *upstream, models ...string) config.Backend {
	b := backendFor(u, models...)
	b.ResponsesAPI = config.ResponsesConverted
	return b
}

// A shim replica without responses_api is an OpenAI-wire backend: the
// Responses body passes through to its /v1/responses, pinned by model
// with decimal pins, minus the client's x-dynamo-* headers and nvext pins
// and token_data; its answer is relayed as it came, minus x-dynamo-*.
func TestResponsesPassthroughPinned(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	shim.setRespond(respondNative)
	cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel))
	cfg.Dynamo.Shim.ModelMap = map[string]string{clientModel: dynamoModel}
	f := newFixture(t, cfg, pairWorkers(dynamoModel))

	var httpResp *http.Response
	cli := f.client(
		option.WithHeader("X-Dynamo-Worker-Instance-Id", "1"),
		option.WithHeader("X-Prefill-Instance-Id", "2"),
		option.WithJSONSet("nvext", map[string]any{"token_data": []int{1, 2}, "backend_instance_id": 5, "annotations": []string{"keep"}}),
		option.WithResponseInto(&httpResp),
	)
	res, err := cli.Responses.New(context.Background(), responses.ResponseNewParams{
		Model:        clientModel,
		Instructions: openai.String("Be brief."),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello")},
	})
	require.NoError(t, err)
	assert.Equal(t, "native hello", res.OutputText())
	assert.Equal(t, "resp_native", res.ID, "relayed as it came")
	assert.Empty(t, dynamoHeaders(httpResp.Header))

	got := shim.requests()
	require.Len(t, got, 1)
	assert.Equal(t, pathResponses, got[0].Path)
	assert.Equal(t, map[string]string{
		"x-dynamo-worker-instance-id":  strconv.FormatUint(decodeID, 10),
		"x-dynamo-prefill-instance-id": strconv.FormatUint(prefillID, 10),
	}, dynamoHeaders(got[0].Header))
	body := jsonOf(t, got[0].Body)
	assert.Equal(t, clientModel, body["model"])
	assert.Equal(t, "Say hello", body["input"])
	assert.Equal(t, "Be brief.", body["instructions"])
	assert.Equal(t, map[string]any{"annotations": []any{"keep"}}, body["nvext"], "client pins and token_data stripped")
	assert.Equal(t, dynamoModel, f.picker.lastPick().Model)
	eventuallyCount(t, f, 1.0, "http", metrics.RouteResponses, "200")
	eventuallyCount(t, f, 1.0, "routing_path", metrics.PathDisaggregated)
}

// With responses_api: converted, the shim gets a chat completion
// (instructions as the leading system message, max_output_tokens as
// max_tokens, the client's model id, items converted) and the client a
// Responses object.
func TestResponsesConvertedBuffered(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, convertedBackend(shim, clientModel)), pairWorkers(clientModel))

	var httpResp *http.Response
	cli := f.client(option.WithResponseInto(&httpResp), option.WithHeader("X-Dynamo-Worker-Instance-Id", "7"))
	res, err := cli.Responses.New(context.Background(), responses.ResponseNewParams{
		Model:           clientModel,
		Instructions:    openai.String("Be brief."),
		MaxOutputTokens: openai.Int(64),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello")},
	})
	require.NoError(t, err)
	assert.Equal(t, "hello from dyn-a", res.OutputText())
	assert.True(t, strings.HasPrefix(res.ID, "resp_"), res.ID)
	assert.Equal(t, responses.ResponseStatusCompleted, res.Status)
	assert.Equal(t, clientModel, res.Model)
	assert.Equal(t, int64(3), res.Usage.InputTokens)
	assert.Equal(t, int64(3), res.Usage.OutputTokens)
	assert.Equal(t, int64(6), res.Usage.TotalTokens)
	raw := jsonOf(t, []byte(res.RawJSON()))
	assert.Equal(t, "response", raw["object"])
	out := raw["output"].([]any)[0].(map[string]any)
	assert.Equal(t, "message", out["type"])
	assert.Equal(t, "assistant", out["role"])
	assert.Equal(t, []any{map[string]any{"type": "output_text", "text": "hello from dyn-a", "annotations": []any{}}}, out["content"])
	assert.Empty(t, dynamoHeaders(httpResp.Header))

	got := shim.requests()
	require.Len(t, got, 1)
	assert.Equal(t, map[string]string{
		"x-dynamo-worker-instance-id":  strconv.FormatUint(decodeID, 10),
		"x-dynamo-prefill-instance-id": strconv.FormatUint(prefillID, 10),
	}, dynamoHeaders(got[0].Header))
	body := chatRequestOf(t, got[0])
	assert.Equal(t, clientModel, body["model"])
	assert.Equal(t, 64.0, body["max_tokens"])
	assert.Equal(t, []map[string]any{
		{"role": "system", "content": "Be brief."},
		{"role": "user", "content": "Say hello"},
	}, messagesOf(t, body))

	// Input items: roles, text parts and images.
	resp, b := f.post(pathResponses, `{"model":"`+clientModel+`","input":[
		{"role":"developer","content":"Rules."},
		{"type":"message","role":"user","content":[{"type":"input_text","text":"Look:"},{"type":"input_image","image_url":"https://example.com/a.png","detail":"low"}]},
		{"role":"assistant","content":[{"type":"output_text","text":"A cat."}]},
		{"role":"user","content":[{"type":"input_text","text":"Sure?"}]}]}`, nil)
	require.Equal(t, 200, resp.StatusCode, string(b))
	assert.Equal(t, []map[string]any{
		{"role": "system", "content": "Rules."},
		{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "Look:"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/a.png", "detail": "low"}},
		}},
		{"role": "assistant", "content": "A cat."},
		{"role": "user", "content": "Sure?"},
	}, messagesOf(t, chatRequestOf(t, shim.requests()[1])))
}

// A converted stream, read by the SDK and parsed raw: the Responses event
// sequence, numbered, each event's data naming its type.
func TestResponsesConvertedStreaming(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	shim.setRespond(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeChunks(w, chunk(true, clientModel, "hello ", ""), chunk(true, clientModel, "world", "stop"), usageChunk(4, 2))
	})
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, convertedBackend(shim, clientModel)), []*discovery.Worker{
		worker("dynamo", aggID, discovery.RoleAggregated, clientModel),
	})
	cli := f.client()
	stream := cli.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: clientModel,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
	})
	var types, deltas []string
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			deltas = append(deltas, ev.Delta)
		case "response.completed":
			final = ev.Response
		}
	}
	require.NoError(t, stream.Err())
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.done",
		"response.content_part.done", "response.output_item.done", "response.completed"}
	assert.Equal(t, want, types)
	assert.Equal(t, []string{"hello ", "world"}, deltas)
	assert.Equal(t, "hello world", final.OutputText())
	assert.Equal(t, int64(6), final.Usage.TotalTokens)
	assert.Equal(t, responses.ResponseStatusCompleted, final.Status)

	body := chatRequestOf(t, shim.requests()[0])
	assert.Equal(t, true, body["stream"])
	assert.Equal(t, map[string]any{"include_usage": true}, body["stream_options"])

	resp, raw := f.post(pathResponses, `{"model":"`+clientModel+`","input":"hi","stream":true}`, nil)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	assert.Empty(t, dynamoHeaders(resp.Header))
	evs := parseSSE(t, raw)
	assert.Equal(t, want, names(evs))
	for i, e := range evs {
		d := dataOf(t, e)
		assert.Equal(t, e.name, d["type"])
		assert.Equal(t, float64(i), d["sequence_number"])
	}
	assert.Equal(t, "hello world", dataOf(t, evs[6])["text"])
}

// A length finish makes the response incomplete, buffered and streamed.
func TestResponsesConvertedIncomplete(t *testing.T) {
	vllm := newUpstream(t, "vllm")
	vllm.setRespond(func(w http.ResponseWriter, r *http.Request, body []byte) {
		if strings.Contains(string(body), `"stream":true`) {
			writeChunks(w, chunk(true, plainModel, "cut", "length"))
			return
		}
		_ = json.NewEncoder(w).Encode(completion(true, plainModel, "cut", "length"))
	})
	f := newFixture(t, dynamoConfig(nil, convertedBackend(vllm, plainModel)), nil)
	resp, body := f.post(pathResponses, `{"model":"`+plainModel+`","input":"hi","max_output_tokens":1}`, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	m := jsonOf(t, body)
	assert.Equal(t, "incomplete", m["status"])
	assert.Equal(t, map[string]any{"reason": "max_output_tokens"}, m["incomplete_details"])

	resp, body = f.post(pathResponses, `{"model":"`+plainModel+`","input":"hi","stream":true}`, nil)
	require.Equal(t, 200, resp.StatusCode)
	evs := parseSSE(t, body)
	last := evs[len(evs)-1]
	assert.Equal(t, "response.incomplete", last.name)
	assert.Equal(t, "incomplete", dataOf(t, last)["response"].(map[string]any)["status"])
}

// A direct-mode refusal is a 503 with the OpenAI code, for converted and
// native sends, buffered and streaming.
func TestResponsesDirectModeRefusal(t *testing.T) {
	for _, mode := range []string{"", config.ResponsesNative, config.ResponsesConverted} {
		for _, stream := range []bool{false, true} {
			t.Run("mode="+mode+",stream="+strconv.FormatBool(stream), func(t *testing.T) {
				shim := newUpstream(t, "dyn-a")
				shim.setRespond(respondStatus(http.StatusInternalServerError, refusalText))
				b := backendFor(shim, clientModel)
				b.ResponsesAPI = mode
				f := newFixture(t, dynamoConfig([]string{"dyn-a"}, b), pairWorkers(clientModel))
				resp, body := f.post(pathResponses, `{"model":"`+clientModel+`","input":"hi","stream":`+strconv.FormatBool(stream)+`}`, nil)
				assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
				assert.Equal(t, codePrefillDecodeUnavailable, errorCode(t, body))
				eventuallyCount(t, f, 1.0, "disagg_errors", metrics.PhaseOrchestration)
				assert.Empty(t, dynamoHeaders(resp.Header))
			})
		}
	}
}

// A request the converter cannot express is a 400 when it would go to a
// converting backend; a native backend takes it as it is.
func TestResponsesUnconvertible(t *testing.T) {
	conv, native := newUpstream(t, "conv"), newUpstream(t, "native")
	native.setRespond(respondNative)
	f := newFixture(t, dynamoConfig(nil, convertedBackend(conv, plainModel), backendFor(native, clientModel)), nil)
	for _, tc := range []struct{ body, want string }{
		{`"input":"hi","tools":[{"type":"function","name":"f","parameters":{}}]`, "tools"},
		{`"input":"hi","previous_response_id":"resp_1"`, "previous_response_id"},
		{`"input":[{"type":"function_call_output","call_id":"c","output":"x"}]`, "input[0]"},
		{`"input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]`, "input[0].content[0]"},
		{`"input":"hi","text":{"format":{"type":"json_schema"}}`, "text.format"},
		{`"input":7`, "input must be"},
		{`"input":"hi","max_output_tokens":0`, "max_output_tokens"},
	} {
		resp, body := f.post(pathResponses, `{"model":"`+plainModel+`",`+tc.body+`}`, nil)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, tc.body)
		assert.Equal(t, codeInvalidRequest, errorCode(t, body))
		assert.Contains(t, string(body), tc.want)

		resp, body = f.post(pathResponses, `{"model":"`+clientModel+`",`+tc.body+`}`, nil)
		assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	}
	assert.Empty(t, conv.requests())
	assert.Len(t, native.requests(), 7)
}

// /v1/responses/compact is not routed, so never sent unpinned to a shim.
func TestResponsesCompactIsNotRouted(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel)), pairWorkers(clientModel))
	resp, body := f.post(pathResponses+"/compact", `{"model":"`+clientModel+`","input":"hi"}`, nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, codeNotFound, errorCode(t, body))
	assert.Empty(t, shim.requests())
	picks, _ := f.picker.counts()
	assert.Zero(t, picks)
}

// The Responses ingress refuses bad requests and credentials in OpenAI's
// shape before routing.
func TestResponsesClientErrors(t *testing.T) {
	vllm := newUpstream(t, "vllm")
	cfg := dynamoConfig(nil, backendFor(vllm, plainModel))
	cfg.APIKeys = []config.APIKey{{Key: "team-key-0123456789abcdef"}}
	f := newFixture(t, cfg, nil)
	resp, body := f.post(pathResponses, `{"model":"llama-3-8b","input":"hi"}`, nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Equal(t, codeInvalidAPIKey, errorCode(t, body))
	bearer := http.Header{"Authorization": {"Bearer team-key-0123456789abcdef"}}
	resp, body = f.post(pathResponses, `{"input":"hi"}`, bearer)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, codeInvalidRequest, errorCode(t, body))
	resp, body = f.post(pathResponses, `{"model":"gpt-17","input":"hi"}`, bearer)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, codeModelNotFound, errorCode(t, body))
	resp, body = f.get(pathResponses, bearer)
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, codeMethodNotAllowed, errorCode(t, body))
	assert.Empty(t, vllm.requests())
}
