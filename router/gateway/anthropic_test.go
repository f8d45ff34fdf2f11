package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/metrics"
)

// anthropicClient is the real Anthropic SDK pointed at the gateway; base
// is "" for /v1/messages or "/anthropic" for /anthropic/v1/messages.
func anthropicClient(f *fixture, base string, opts ...aoption.RequestOption) anthropic.Client {
	all := []aoption.RequestOption{
		aoption.WithBaseURL(f.srv.URL + base + "/"), aoption.WithAPIKey("client-key"), aoption.WithMaxRetries(0),
	}
	return anthropic.NewClient(append(all, opts...)...)
}

// anthropicErrorOfBody decodes an Anthropic error body strictly.
func anthropicErrorOfBody(t *testing.T, body []byte) anthropicError {
	t.Helper()
	var e anthropicError
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&e), string(body))
	require.Equal(t, "error", e.Type)
	return e
}

// A Messages request through a shim pair, with the real Anthropic SDK:
// the shim gets a chat body (system first, the client's model id, tools,
// tool calls and results, images converted), decimal pins and none of
// the client's x-dynamo-*, Anthropic or credential headers; the client
// gets an Anthropic message and no x-dynamo-* header.
func TestAnthropicMessagesThroughShimPair(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel))
	cfg.Dynamo.Shim.ModelMap = map[string]string{clientModel: dynamoModel}
	f := newFixture(t, cfg, []*discovery.Worker{
		withDP(worker("dynamo", prefillID, discovery.RolePrefill, dynamoModel), 0),
		worker("dynamo", decodeID, discovery.RoleDecode, dynamoModel),
	})

	var httpResp *http.Response
	cli := anthropicClient(f, "",
		aoption.WithHeader("x-backend", ""),
		aoption.WithHeader("X-Dynamo-Worker-Instance-Id", "1"),
		aoption.WithHeader("x-dynamo-prefill-instance-id", "2"),
		aoption.WithHeader("X-Request-Id", "req-9"),
		aoption.WithResponseInto(&httpResp),
	)
	weather := anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
		Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"},
	}, "weather")
	weather.OfTool.Description = anthropic.String("Current weather")
	msg, err := cli.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model:         anthropic.Model(clientModel),
		MaxTokens:     256,
		Temperature:   anthropic.Float(0.25),
		StopSequences: []string{"END"},
		Metadata:      anthropic.MetadataParam{UserID: anthropic.String("user-7")},
		System:        []anthropic.TextBlockParam{{Text: "You are terse."}, {Text: "Answer in English."}},
		Tools:         []anthropic.ToolUnionParam{weather},
		ToolChoice:    anthropic.ToolChoiceParamOfTool("weather"),
		Messages: []anthropic.MessageParam{
			anthropic.NewUserMessage(anthropic.NewTextBlock("What's the weather?")),
			anthropic.NewAssistantMessage(anthropic.NewTextBlock("Let me check."),
				anthropic.NewToolUseBlock("call_1", map[string]any{"city": "Paris"}, "weather")),
			anthropic.NewUserMessage(anthropic.NewToolResultBlock("call_1", "sunny", false),
				anthropic.NewTextBlock("Thanks <b>&</b>"), anthropic.NewImageBlockBase64("image/png", "iVBORw0KGgo=")),
		},
	})
	require.NoError(t, err)

	// What the client sees.
	assert.Equal(t, anthropic.Model(clientModel), msg.Model)
	assert.True(t, strings.HasPrefix(msg.ID, "msg_"), msg.ID)
	require.Len(t, msg.Content, 1)
	assert.Equal(t, "text", msg.Content[0].Type)
	assert.Equal(t, "hello from dyn-a", msg.Content[0].Text)
	assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)
	assert.Equal(t, int64(3), msg.Usage.InputTokens)
	assert.Equal(t, int64(3), msg.Usage.OutputTokens)
	raw := jsonOf(t, []byte(msg.RawJSON()))
	assert.Equal(t, "message", raw["type"])
	assert.Equal(t, "assistant", raw["role"])
	assert.Contains(t, raw, "stop_sequence")
	assert.Nil(t, raw["stop_sequence"])
	assert.Empty(t, dynamoHeaders(httpResp.Header), "no x-dynamo-* header reaches the client")
	assert.Equal(t, "application/json", httpResp.Header.Get("Content-Type"))
	assert.Equal(t, "dyn-a", httpResp.Header.Get(hdrDiscloseBackend))
	assert.Equal(t, strconv.FormatUint(decodeID, 10), httpResp.Header.Get(hdrDiscloseWorkerID))

	// What the shim got.
	assert.Equal(t, dynamoModel, f.picker.lastPick().Model, "the picker matches on the Dynamo name")
	assert.NotZero(t, f.picker.lastPick().PromptTokens, "estimated on the converted body")
	got := shim.requests()
	require.Len(t, got, 1)
	assert.Equal(t, map[string]string{
		"x-dynamo-worker-instance-id":  strconv.FormatUint(decodeID, 10),
		"x-dynamo-prefill-instance-id": strconv.FormatUint(prefillID, 10),
		"x-dynamo-prefill-dp-rank":     "0",
	}, dynamoHeaders(got[0].Header))
	assert.Equal(t, "req-9", got[0].Header.Get("X-Request-Id"))
	for _, h := range []string{"Authorization", "X-Api-Key", "Anthropic-Version"} {
		assert.Empty(t, got[0].Header.Values(h), h)
	}
	body := chatRequestOf(t, got[0])
	assert.Equal(t, clientModel, body["model"], "the outbound body keeps the client's model id")
	assert.Equal(t, 256.0, body["max_tokens"])
	assert.Equal(t, 0.25, body["temperature"])
	assert.Equal(t, []any{"END"}, body["stop"])
	assert.Equal(t, "user-7", body["user"])
	assert.NotContains(t, body, "stream")
	assert.NotContains(t, body, "nvext")
	assert.Equal(t, []any{map[string]any{"type": "function", "function": map[string]any{
		"name": "weather", "description": "Current weather",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}},
	}}}, body["tools"])
	assert.Equal(t, map[string]any{"type": "function", "function": map[string]any{"name": "weather"}}, body["tool_choice"])
	assert.Equal(t, []map[string]any{
		{"role": "system", "content": "You are terse.\nAnswer in English."},
		{"role": "user", "content": "What's the weather?"},
		{"role": "assistant", "content": "Let me check.", "tool_calls": []any{map[string]any{
			"id": "call_1", "type": "function", "function": map[string]any{"name": "weather", "arguments": `{"city":"Paris"}`}}}},
		{"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
		{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "Thanks <b>&</b>"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,iVBORw0KGgo="}},
		}},
	}, messagesOf(t, body))
	assert.Contains(t, string(got[0].Body), "<b>&</b>", "no HTML escaping on the way")

	eventuallyCount(t, f, 1.0, "http", metrics.RouteMessages, "200")
	eventuallyCount(t, f, 1.0, "routing_path", metrics.PathDisaggregated)
}

// Streaming through /anthropic/v1/messages: the SDK accumulates the
// message, and the raw stream is Anthropic's event sequence, each event
// well formed.
func TestAnthropicStreaming(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel)), []*discovery.Worker{
		withDP(worker("dynamo", aggID, discovery.RoleAggregated, clientModel), 0),
	})
	mountAnthropic(f)
	cli := anthropicClient(f, "/anthropic")
	stream := cli.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: anthropic.Model(clientModel), MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	var msg anthropic.Message
	var deltas []string
	for stream.Next() {
		ev := stream.Current()
		require.NoError(t, msg.Accumulate(ev))
		if d, ok := ev.AsAny().(anthropic.ContentBlockDeltaEvent); ok {
			deltas = append(deltas, d.Delta.Text)
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, []string{"hello ", "from ", "dyn-a"}, deltas, "one text delta per upstream chunk")
	require.Len(t, msg.Content, 1)
	assert.Equal(t, "hello from dyn-a", msg.Content[0].Text)
	assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)
	assert.Equal(t, anthropic.Model(clientModel), msg.Model)

	got := shim.requests()
	require.Len(t, got, 1)
	body := chatRequestOf(t, got[0])
	assert.Equal(t, true, body["stream"])
	assert.Equal(t, map[string]any{"include_usage": true}, body["stream_options"])
	assert.Equal(t, "text/event-stream", got[0].Header.Get("Accept"))
	assert.Equal(t, map[string]string{
		"x-dynamo-worker-instance-id": strconv.FormatUint(aggID, 10),
		"x-dynamo-dp-rank":            "0",
	}, dynamoHeaders(got[0].Header))

	resp, raw := f.post(pathAnthropicMessages, `{"model":"`+clientModel+`","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	require.Equal(t, 200, resp.StatusCode, string(raw))
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	assert.Empty(t, dynamoHeaders(resp.Header))
	evs := parseSSE(t, raw)
	assert.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_delta", "content_block_stop", "message_delta", "message_stop"}, names(evs))
	for _, e := range evs {
		assert.Equal(t, e.name, dataOf(t, e)["type"], "each event's data names its type")
	}
	assert.Equal(t, map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}, dataOf(t, evs[6])["delta"])
	eventuallyCount(t, f, 2.0, "http", metrics.RouteMessages, "200")
}

// Tool calls streamed in fragments become tool_use blocks with
// input_json_delta events; usage from the final chunk ends the message.
func TestAnthropicStreamingToolUse(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	shim.setRespond(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		writeChunks(w,
			chunk(true, clientModel, "Checking.", ""),
			toolChunk(map[string]any{"index": 0, "id": "call_9", "type": "function", "function": map[string]any{"name": "weather", "arguments": ""}}),
			toolChunk(map[string]any{"index": 0, "function": map[string]any{"arguments": `{"city":`}}),
			toolChunk(map[string]any{"index": 0, "function": map[string]any{"arguments": `"Oslo"}`}}),
			toolChunk(map[string]any{"index": 1, "id": "call_10", "type": "function", "function": map[string]any{"name": "clock", "arguments": "{}"}}),
			finishChunk("tool_calls"),
			usageChunk(11, 7),
		)
	})
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel)), pairWorkers(clientModel))
	cli := anthropicClient(f, "")
	stream := cli.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: anthropic.Model(clientModel), MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("weather and time?"))},
	})
	var msg anthropic.Message
	for stream.Next() {
		require.NoError(t, msg.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	require.Len(t, msg.Content, 3)
	assert.Equal(t, "Checking.", msg.Content[0].Text)
	assert.Equal(t, "tool_use", msg.Content[1].Type)
	assert.Equal(t, "call_9", msg.Content[1].ID)
	assert.Equal(t, "weather", msg.Content[1].Name)
	assert.JSONEq(t, `{"city":"Oslo"}`, string(msg.Content[1].Input))
	assert.Equal(t, "clock", msg.Content[2].Name)
	assert.JSONEq(t, `{}`, string(msg.Content[2].Input))
	assert.Equal(t, anthropic.StopReasonToolUse, msg.StopReason)
	assert.Equal(t, int64(7), msg.Usage.OutputTokens)

	resp, raw := f.post(pathMessages, `{"model":"`+clientModel+`","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	require.Equal(t, 200, resp.StatusCode)
	evs := parseSSE(t, raw)
	assert.Equal(t, []string{"message_start",
		"content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop"}, names(evs))
	assert.Equal(t, map[string]any{"input_tokens": 11.0, "output_tokens": 7.0}, dataOf(t, evs[11])["usage"])
	for i, want := range map[int]float64{1: 0, 4: 1, 8: 2} {
		assert.Equal(t, want, dataOf(t, evs[i])["index"], "block indices count up")
	}
}

// Buffered answers: tool calls become tool_use blocks with object input;
// finish reasons map to Anthropic's stop reasons, a matched stop sequence
// (vLLM's stop_reason) included.
func TestAnthropicBufferedStopReasons(t *testing.T) {
	for _, tc := range []struct {
		name    string
		choice  map[string]any
		reason  string
		seq     any
		content []any
	}{
		{"tool calls", map[string]any{"finish_reason": "tool_calls", "message": map[string]any{"role": "assistant", "content": nil,
			"tool_calls": []any{map[string]any{"id": "call_3", "type": "function", "function": map[string]any{"name": "weather", "arguments": `{"city": "Rome"}`}}}}},
			"tool_use", nil, []any{map[string]any{"type": "tool_use", "id": "call_3", "name": "weather", "input": map[string]any{"city": "Rome"}}}},
		{"malformed arguments", map[string]any{"finish_reason": "tool_calls", "message": map[string]any{"role": "assistant",
			"tool_calls": []any{map[string]any{"type": "function", "function": map[string]any{"name": "x", "arguments": `{"broken`}}}}},
			"tool_use", nil, nil},
		{"length", map[string]any{"finish_reason": "length", "message": map[string]any{"content": "cut"}},
			"max_tokens", nil, []any{map[string]any{"type": "text", "text": "cut"}}},
		{"stop sequence", map[string]any{"finish_reason": "stop", "stop_reason": "END", "message": map[string]any{"content": "done"}},
			"stop_sequence", "END", []any{map[string]any{"type": "text", "text": "done"}}},
		{"eos", map[string]any{"finish_reason": "stop", "stop_reason": nil, "message": map[string]any{"content": "done"}},
			"end_turn", nil, []any{map[string]any{"type": "text", "text": "done"}}},
		{"content filter", map[string]any{"finish_reason": "content_filter", "message": map[string]any{"content": ""}},
			"refusal", nil, []any{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vllm := newUpstream(t, "vllm")
			vllm.setRespond(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				tc.choice["index"] = 0
				_ = json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-9", "object": "chat.completion", "choices": []any{tc.choice},
					"usage": map[string]any{"prompt_tokens": 5, "completion_tokens": 2}})
			})
			f := newFixture(t, dynamoConfig(nil, backendFor(vllm, plainModel)), nil)
			resp, body := f.post(pathMessages, `{"model":"`+plainModel+`","max_tokens":8,"stop_sequences":["END"],"messages":[{"role":"user","content":"hi"}]}`, nil)
			require.Equal(t, 200, resp.StatusCode, string(body))
			m := jsonOf(t, body)
			assert.Equal(t, tc.reason, m["stop_reason"])
			assert.Equal(t, tc.seq, m["stop_sequence"])
			assert.Equal(t, map[string]any{"input_tokens": 5.0, "output_tokens": 2.0}, m["usage"])
			assert.Equal(t, plainModel, m["model"])
			if tc.content != nil {
				assert.Equal(t, tc.content, m["content"])
			} else {
				block := m["content"].([]any)[0].(map[string]any)
				assert.Equal(t, map[string]any{}, block["input"], "malformed arguments become an empty input object")
				assert.True(t, strings.HasPrefix(block["id"].(string), "toolu_"), "a missing id is made up")
			}
		})
	}
}

// A direct-mode refusal is a 503 api_error whose message ends with the
// gateway's code, buffered and streaming (the refusal is an error head),
// with the chat path's accounting and no fallback.
func TestAnthropicDirectModeRefusal(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			shim, vllm := newUpstream(t, "dyn-a"), newUpstream(t, "vllm")
			shim.setRespond(respondStatus(http.StatusInternalServerError, refusalText))
			cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel), backendFor(vllm, clientModel))
			cfg.DisaggregatedServing.FallbackToUnified = true
			f := newFixture(t, cfg, pairWorkers(clientModel))
			resp, body := f.post(pathMessages, `{"model":"`+clientModel+`","max_tokens":8,"stream":`+strconv.FormatBool(stream)+`,"messages":[{"role":"user","content":"hi"}]}`, nil)
			assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			e := anthropicErrorOfBody(t, body)
			assert.Equal(t, "api_error", e.Error.Type)
			assert.True(t, strings.HasSuffix(e.Error.Message, "disaggregated_prefill_decode_unavailable"), e.Error.Message)
			assert.Empty(t, dynamoHeaders(resp.Header))
			assert.Empty(t, vllm.requests(), "no fallback")
			eventuallyCount(t, f, 1.0, "disagg_errors", metrics.PhaseOrchestration)
			eventuallyCount(t, f, 1.0, "http", metrics.RouteMessages, "503")
			_, ended := f.picker.counts()
			assert.Equal(t, 1, ended)
		})
	}
}

// The SDK raises the converted error as Anthropic's error type.
func TestAnthropicSDKSeesErrors(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	shim.setRespond(respondStatus(http.StatusInternalServerError, refusalText))
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel)), pairWorkers(clientModel))
	cli := anthropicClient(f, "")
	_, err := cli.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: anthropic.Model(clientModel), MaxTokens: 8,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	var apiErr *anthropic.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusServiceUnavailable, apiErr.StatusCode)
	assert.Contains(t, apiErr.Error(), "disaggregated_prefill_decode_unavailable")
}

// Upstream errors are re-shaped: status kept, message (and code) carried,
// Anthropic's error type for the status.
func TestAnthropicUpstreamErrors(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		typ    string
		msg    string
	}{
		{400, `{"error":{"message":"prompt is too long","type":"invalid_request_error","code":"context_length_exceeded"}}`, "invalid_request_error", "prompt is too long: context_length_exceeded"},
		{400, `{"object":"error","message":"bad temperature","type":"BadRequestError","code":400}`, "invalid_request_error", "bad temperature: upstream_error"},
		{429, `{"error":"slow down"}`, "rate_limit_error", "slow down: upstream_error"},
		{500, `<html>oops</html>`, "api_error", "the backend answered HTTP 500 Internal Server Error: upstream_error"},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			vllm := newUpstream(t, "vllm")
			vllm.setRespond(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			})
			f := newFixture(t, dynamoConfig(nil, backendFor(vllm, plainModel)), nil)
			resp, body := f.post(pathMessages, `{"model":"`+plainModel+`","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
			assert.Equal(t, tc.status, resp.StatusCode)
			e := anthropicErrorOfBody(t, body)
			assert.Equal(t, tc.typ, e.Error.Type)
			assert.Equal(t, tc.msg, e.Error.Message)
			assert.Empty(t, dynamoHeaders(resp.Header))
		})
	}
}

// A stream that breaks after its head ends with Anthropic's error event
// after the last complete event.
func TestAnthropicMidStreamFailure(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	shim.setRespond(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, chunk(true, clientModel, "partial ", ""))
		_, _ = io.WriteString(w, "data: {\"half an")
		w.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	})
	cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel))
	cfg.Backends[0].HealthCheck.Enabled = false
	f := newFixture(t, cfg, pairWorkers(clientModel))
	resp, body := f.post(pathMessages, `{"model":"`+clientModel+`","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	require.Equal(t, 200, resp.StatusCode)
	evs := parseSSE(t, body)
	assert.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "error"}, names(evs))
	e := dataOf(t, evs[3])["error"].(map[string]any)
	assert.Equal(t, "api_error", e["type"])
	assert.True(t, strings.HasSuffix(e["message"].(string), codeStreamBroken), e["message"])
	_, ended := f.picker.counts()
	assert.Equal(t, 1, ended)
	eventuallyCount(t, f, 1.0, "backend", "dyn-a", metrics.ResultStreamError)
}

// Bad requests, credentials, methods and paths get Anthropic-shaped
// errors, and nothing is sent upstream.
func TestAnthropicClientErrors(t *testing.T) {
	vllm := newUpstream(t, "vllm")
	cfg := dynamoConfig(nil, backendFor(vllm, plainModel))
	cfg.APIKeys = []config.APIKey{{Key: "team-key-0123456789abcdef"}}
	f := newFixture(t, cfg, nil)
	mountAnthropic(f)
	key := http.Header{"X-Api-Key": {"team-key-0123456789abcdef"}}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, body string
		status     int
		typ, want  string
	}{
		{"not json", `{"model":`, 400, "invalid_request_error", "JSON object"},
		{"no model", `{"max_tokens":8,` + msgs + `}`, 400, "invalid_request_error", "model must be a non-empty string"},
		{"no max_tokens", `{"model":"llama-3-8b",` + msgs + `}`, 400, "invalid_request_error", "max_tokens must be a positive integer"},
		{"fractional max_tokens", `{"model":"llama-3-8b","max_tokens":1.5,` + msgs + `}`, 400, "invalid_request_error", "max_tokens"},
		{"no messages", `{"model":"llama-3-8b","max_tokens":8}`, 400, "invalid_request_error", "messages must be a non-empty array"},
		{"bad role", `{"model":"llama-3-8b","max_tokens":8,"messages":[{"role":"system","content":"x"}]}`, 400, "invalid_request_error", "messages[0].role"},
		{"bad block", `{"model":"llama-3-8b","max_tokens":8,"messages":[{"role":"user","content":[{"type":"document"}]}]}`, 400, "invalid_request_error", "messages[0].content[0].type"},
		{"file url image", `{"model":"llama-3-8b","max_tokens":8,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"file:///etc/passwd"}}]}]}`, 400, "invalid_request_error", "http or https"},
		{"server tool", `{"model":"llama-3-8b","max_tokens":8,"tools":[{"type":"web_search_20250305","name":"web_search"}],` + msgs + `}`, 400, "invalid_request_error", "server tool"},
		{"field names are exact", `{"Model":"llama-3-8b","max_tokens":8,` + msgs + `}`, 400, "invalid_request_error", "model"},
		{"too many blocks", `{"model":"llama-3-8b","max_tokens":8,"messages":[{"role":"user","content":[` + strings.Repeat(`{"type":"text","text":"x"},`, maxBlocks) + `{"type":"text","text":"x"}]}]}`, 400, "invalid_request_error", "more than 4096 content blocks"},
		{"unknown model", `{"model":"gpt-17","max_tokens":8,` + msgs + `}`, 404, "not_found_error", "model_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := f.post(pathAnthropicMessages, tc.body, key)
			assert.Equal(t, tc.status, resp.StatusCode)
			e := anthropicErrorOfBody(t, body)
			assert.Equal(t, tc.typ, e.Error.Type)
			assert.Contains(t, e.Error.Message, tc.want)
		})
	}
	resp, body := f.post(pathMessages, `{"model":"llama-3-8b","max_tokens":8,`+msgs+`}`, http.Header{"X-Api-Key": {"wrong"}})
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Equal(t, "authentication_error", anthropicErrorOfBody(t, body).Error.Type)
	resp, body = f.post(pathMessages, `{"model":"llama-3-8b","max_tokens":8,`+msgs+`}`, http.Header{"Authorization": {"Bearer team-key-0123456789abcdef"}})
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body), "a bearer token works too")
	resp, body = f.get(pathAnthropicMessages, key)
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "POST", resp.Header.Get("Allow"))
	assert.Equal(t, "invalid_request_error", anthropicErrorOfBody(t, body).Error.Type)
	resp, body = f.post("/anthropic/v1/complete", `{}`, key)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, "not_found_error", anthropicErrorOfBody(t, body).Error.Type)

	got := vllm.requests()
	require.Len(t, got, 1, "only the bearer request went out")
	assert.Empty(t, got[0].Header.Get("Authorization"))
	eventuallyCount(t, f, 1.0, "http", metrics.RouteMessages, "401")
}
