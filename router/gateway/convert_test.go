package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/metrics"
	"switchyard/router/picker"
)

// twoDecoders is a pair namespace with two decode workers, so a rotating
// picker gives consecutive picks different decode pins.
func twoDecoders(model string) []*discovery.Worker {
	return []*discovery.Worker{
		worker("dynamo", prefillID, discovery.RolePrefill, model),
		worker("dynamo", decodeID, discovery.RoleDecode, model),
		worker("dynamo", decodeID+2, discovery.RoleDecode, model),
	}
}

// deadShim is a configured replica nothing listens behind.
func deadShim(t *testing.T, model string) config.Backend {
	b := config.DefaultBackend()
	b.Name, b.URL, b.Models = "dyn-dead", deadURL(t), []string{model}
	b.HealthCheck.Enabled = false // the request, not a probe, must find it down
	return b
}

func (p *rrPicker) endedSelections() []picker.Selection {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]picker.Selection(nil), p.ended...)
}

func (p *rrPicker) allPicks() []picker.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]picker.Request(nil), p.picks...)
}

// A converted request picks anew for every send: after a connection
// failure the retry on the next replica carries a fresh pin (here the
// other decode worker, as the picker rotates), the abandoned selection is
// reported ended, and the fresh pick is a new dispatch narrowed to the
// same namespace. The OpenAI chat path keeps its pins (the contrast).
func TestConvertedRetryGetsFreshPin(t *testing.T) {
	decodeB := strconv.FormatUint(decodeID+2, 10)
	for _, tc := range []struct {
		name, path, body, mode string
		fresh                  bool
	}{
		{"anthropic", pathMessages, `{"model":%q,"max_tokens":8,"stream":%t,"messages":[{"role":"user","content":"hi"}]}`, "", true},
		{"responses converted", pathResponses, `{"model":%q,"stream":%t,"input":"hi"}`, config.ResponsesConverted, true},
		{"responses native", pathResponses, `{"model":%q,"stream":%t,"input":"hi"}`, "", true},
		{"openai chat", pathChat, `{"model":%q,"stream":%t,"messages":[{"role":"user","content":"hi"}]}`, "", false},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(tc.name+",stream="+strconv.FormatBool(stream), func(t *testing.T) {
				live := newUpstream(t, "dyn-live")
				live.setRespond(func(w http.ResponseWriter, r *http.Request, body []byte) {
					if r.URL.Path == pathResponses && !stream {
						respondNative(w, r, body)
						return
					}
					answer(w, r, body, "ok")
				})
				lb := backendFor(live, clientModel)
				lb.ResponsesAPI = tc.mode
				dead := deadShim(t, clientModel)
				dead.ResponsesAPI = tc.mode
				f := newFixture(t, dynamoConfig([]string{"dyn-dead", "dyn-live"}, dead, lb), twoDecoders(clientModel))

				resp, body := f.post(tc.path, strings.ReplaceAll(fmtBody(tc.body, clientModel, stream), "\n", ""), nil)
				require.Equal(t, 200, resp.StatusCode, string(body))
				assert.Empty(t, dynamoHeaders(resp.Header))
				got := live.requests()
				require.Len(t, got, 1)
				picks := f.picker.allPicks()
				ended := f.picker.endedSelections()
				if !tc.fresh {
					assert.Len(t, picks, 1, "the chat path never re-selects")
					assert.Equal(t, strconv.FormatUint(decodeID, 10), got[0].Header.Get(hdrWorkerID), "same pins on the retry")
					assert.Empty(t, ended)
					return
				}
				require.Len(t, picks, 2, "one pick per send")
				assert.Equal(t, map[string]string{
					"x-dynamo-worker-instance-id":  decodeB,
					"x-dynamo-prefill-instance-id": strconv.FormatUint(prefillID, 10),
				}, dynamoHeaders(got[0].Header), "the retry carries the fresh pick, not the first")
				f.picker.mu.Lock()
				first, second := f.picker.sels[0].Decode.WorkerID, f.picker.sels[1].Decode.WorkerID
				f.picker.mu.Unlock()
				assert.Equal(t, []uint64{decodeID, decodeID + 2}, []uint64{first, second}, "two different decode pins")
				require.Len(t, ended, 1, "the abandoned selection is reported ended")
				assert.Equal(t, decodeID, ended[0].Decode.WorkerID)
				assert.NotEqual(t, picks[0].ID, picks[1].ID, "each send is its own dispatch")
				assert.Equal(t, []string{"dynamo"}, picks[1].Namespaces)
				eventuallyCount(t, f, 1.0, "backend", "dyn-dead", metrics.ResultConnectError)
				eventuallyCount(t, f, 1.0, "backend", "dyn-live", metrics.ResultOK)
				assert.Equal(t, 0.0, counter(t, f, "disagg_errors", metrics.PhaseDecode))
			})
		}
	}
}

func fmtBody(format, model string, stream bool) string {
	return strings.Replace(strings.Replace(format, "%q", strconv.Quote(model), 1), "%t", strconv.FormatBool(stream), 1)
}

// refuseAfter is a picker that answers its first n picks through rr and
// then finds no worker.
type refuseAfter struct {
	rr *rrPicker
	mu sync.Mutex
	n  int
}

func (p *refuseAfter) Pick(req picker.Request, snap *discovery.Snapshot) (picker.Selection, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return picker.Selection{}, false
	}
	p.n--
	return p.rr.Pick(req, snap)
}

func (p *refuseAfter) Ended(req picker.Request, sel picker.Selection) { p.rr.Ended(req, sel) }

func (p *refuseAfter) Finished(req picker.Request, sel picker.Selection) { p.rr.Finished(req, sel) }

// When the fresh pick for a retry finds no worker, the walk ends on its
// connection failure: a decode failure, in the client's shape, with the
// abandoned selection reported and nothing sent unpinned to the shim.
func TestConvertedRetryWithoutWorker(t *testing.T) {
	live := newUpstream(t, "dyn-live")
	f := newFixture(t, dynamoConfig([]string{"dyn-dead", "dyn-live"}, deadShim(t, clientModel), backendFor(live, clientModel)), twoDecoders(clientModel))
	f.pinner.set(&refuseAfter{rr: f.picker, n: 1})
	resp, body := f.post(pathMessages, `{"model":"`+clientModel+`","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	e := anthropicErrorOfBody(t, body)
	assert.Equal(t, "api_error", e.Error.Type)
	assert.True(t, strings.HasSuffix(e.Error.Message, codeDecodeFailed), e.Error.Message)
	assert.Empty(t, live.requests())
	assert.Len(t, f.picker.endedSelections(), 1)
	eventuallyCount(t, f, 1.0, "disagg_errors", metrics.PhaseDecode)
}

// A backend that answers a stream request with JSON still gives the
// client the event stream its API promises.
func TestConvertedStreamFromBufferedAnswer(t *testing.T) {
	vllm := newUpstream(t, "vllm")
	vllm.setRespond(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "c", "choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls",
			"message": map[string]any{"content": "Sure.", "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
				"function": map[string]any{"name": "f", "arguments": `{"a":1}`}}}}}},
			"usage": map[string]any{"prompt_tokens": 2, "completion_tokens": 1}})
	})
	b := backendFor(vllm, plainModel)
	b.ResponsesAPI = config.ResponsesConverted
	f := newFixture(t, dynamoConfig(nil, b), nil)

	resp, body := f.post(pathMessages, `{"model":"`+plainModel+`","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	evs := parseSSE(t, body)
	assert.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}, names(evs))
	assert.Equal(t, map[string]any{"type": "input_json_delta", "partial_json": `{"a":1}`}, dataOf(t, evs[5])["delta"])

	resp, body = f.post(pathResponses, `{"model":"`+plainModel+`","stream":true,"input":"hi"}`, nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	evs = parseSSE(t, body)
	assert.Equal(t, "response.completed", evs[len(evs)-1].name)
	assert.Equal(t, "Sure.", dataOf(t, evs[len(evs)-1])["response"].(map[string]any)["output"].([]any)[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"])
}

// A 2xx that is not a chat completion is the backend's failure: a 502 in
// the client's shape.
func TestConvertedInvalidAnswer(t *testing.T) {
	vllm := newUpstream(t, "vllm")
	vllm.setRespond(func(w http.ResponseWriter, _ *http.Request, _ []byte) { _, _ = w.Write([]byte(`{"choices":[]}`)) })
	f := newFixture(t, dynamoConfig(nil, backendFor(vllm, plainModel)), nil)
	resp, body := f.post(pathMessages, `{"model":"`+plainModel+`","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, nil)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.True(t, strings.HasSuffix(anthropicErrorOfBody(t, body).Error.Message, codeUpstreamInvalid))
	eventuallyCount(t, f, 1.0, "backend", "vllm", metrics.ResultServerError)
}

// Request conversion details the HTTP tests do not reach.
func TestAnthropicToChatDetails(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]any
	}{
		{"tool choice any, no parallel calls, top_k, system string, stream",
			`{"model":"m","max_tokens":5,"top_k":40,"stream":true,"system":"S","tool_choice":{"type":"any","disable_parallel_tool_use":true},
			"tools":[{"name":"t","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"q"}]}`,
			map[string]any{"model": "m", "max_tokens": 5.0, "top_k": 40.0, "stream": true, "stream_options": map[string]any{"include_usage": true},
				"tool_choice": "required", "parallel_tool_calls": false,
				"tools":    []any{map[string]any{"type": "function", "function": map[string]any{"name": "t", "parameters": map[string]any{"type": "object"}}}},
				"messages": []any{map[string]any{"role": "system", "content": "S"}, map[string]any{"role": "user", "content": "q"}}}},
		{"thinking dropped, tool-only assistant, tool result images move to the user message, empty system omitted",
			`{"model":"m","max_tokens":5,"system":[],"tool_choice":{"type":"none"},"messages":[
			{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"tool_use","id":"c1","name":"shot","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":[{"type":"text","text":"a"},{"type":"text","text":"b"},
			{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}]}]}`,
			map[string]any{"model": "m", "max_tokens": 5.0, "tool_choice": "none", "messages": []any{
				map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "shot", "arguments": "{}"}}}},
				map[string]any{"role": "tool", "tool_call_id": "c1", "content": "a\nb"},
				map[string]any{"role": "user", "content": []any{map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://x/y.png"}}}},
			}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := anthropicToChat([]byte(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.want, jsonOf(t, c.body))
		})
	}
}

// Stream conversion corner cases, fed straight to the sinks.
func TestAnthropicStreamCorners(t *testing.T) {
	run := func(events ...string) (string, error) {
		var out strings.Builder
		send := func(p []byte) error { out.Write(p); return nil }
		s := newAnthropicStream(&anthropicChat{model: "m"})
		for _, ev := range events {
			part := strings.HasPrefix(ev, "PART:")
			if err := s.event(send, []byte(strings.TrimPrefix(ev, "PART:")), part); err != nil {
				return out.String(), err
			}
		}
		err := s.end(send)
		return out.String(), err
	}
	ev := func(v map[string]any) string { b, _ := json.Marshal(v); return "data: " + string(b) + "\n\n" }
	call := func(i int, id, name, args string) string {
		return ev(toolChunk(map[string]any{"index": i, "id": id, "function": map[string]any{"name": name, "arguments": args}}))
	}

	t.Run("a late fragment of a closed tool call is dropped", func(t *testing.T) {
		out, err := run(call(0, "a", "f", `{"x":`), call(1, "b", "g", `{}`), call(0, "", "", `1}`), ev(finishChunk("tool_calls")), "data: [DONE]\n\n")
		require.NoError(t, err)
		assert.Equal(t, 2, strings.Count(out, "input_json_delta"))
		assert.NotContains(t, out, `1}`)
	})
	t.Run("keep-alives, comments and junk are skipped; [DONE] without a finish ends the turn", func(t *testing.T) {
		out, err := run(": ping\n\n", "data: not json\n\n", "event: x\n\n", ev(chunk(true, "m", "hi", "")), "data: [DONE]\n\n", ev(chunk(true, "m", "after", "")))
		require.NoError(t, err)
		assert.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}, names(parseSSE(t, []byte(out))))
		assert.Contains(t, out, `"stop_reason":"end_turn"`)
		assert.NotContains(t, out, "after")
	})
	t.Run("an oversized event is dropped whole", func(t *testing.T) {
		out, err := run(ev(chunk(true, "m", "a", "")), "PART:data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"HUGE", "\"}}]}\n\n", ev(chunk(true, "m", "b", "stop")))
		require.NoError(t, err)
		assert.NotContains(t, out, "HUGE")
		assert.Equal(t, 2, strings.Count(out, "text_delta"))
	})
	t.Run("a stream that ends without a finish is an error", func(t *testing.T) {
		out, err := run(ev(chunk(true, "m", "a", "")))
		assert.ErrorIs(t, err, errStreamFailed)
		evs := parseSSE(t, []byte(out))
		assert.Equal(t, "error", evs[len(evs)-1].name)
	})
	t.Run("an upstream error event becomes Anthropic's", func(t *testing.T) {
		out, err := run(ev(chunk(true, "m", "a", "")), `data: {"error":{"message":"engine died"}}`+"\n\n")
		assert.ErrorIs(t, err, errStreamFailed)
		evs := parseSSE(t, []byte(out))
		last := dataOf(t, evs[len(evs)-1])
		assert.Equal(t, "engine died: upstream_error", last["error"].(map[string]any)["message"])
	})
}

func TestResponsesStreamCorners(t *testing.T) {
	run := func(events ...string) (string, error) {
		var out strings.Builder
		send := func(p []byte) error { out.Write(p); return nil }
		s := newResponsesStream("m", newManualClock().Now())
		for _, ev := range events {
			if err := s.event(send, []byte(ev), false); err != nil {
				return out.String(), err
			}
		}
		err := s.end(send)
		return out.String(), err
	}
	out, err := run(`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n")
	assert.ErrorIs(t, err, errStreamFailed)
	evs := parseSSE(t, []byte(out))
	assert.Equal(t, "error", evs[len(evs)-1].name)
	assert.Equal(t, codeStreamBroken, dataOf(t, evs[len(evs)-1])["code"])

	out, err = run(`data: {"error":{"message":"boom","code":"oom"}}` + "\n\n")
	assert.ErrorIs(t, err, errStreamFailed)
	assert.Equal(t, []string{"error"}, names(parseSSE(t, []byte(out))))
	assert.Contains(t, out, `"code":"oom"`)
}

// Upstream error bodies in the shapes OpenAI-compatible servers use.
func TestUpstreamError(t *testing.T) {
	for _, tc := range []struct {
		body, code, msg string
	}{
		{`{"error":{"message":"m1","code":"c1"}}`, "c1", "m1"},
		{`{"error":{"message":"m2","code":"has space"}}`, codeUpstreamError, "m2"},
		{`{"error":"m3"}`, codeUpstreamError, "m3"},
		{`{"message":"m4","code":400}`, codeUpstreamError, "m4"},
		{`{"detail":"m5"}`, codeUpstreamError, "m5"},
		{`plain text`, codeUpstreamError, "plain text"},
		{"", codeUpstreamError, "the backend answered HTTP 502 Bad Gateway"},
		{`{"error":{"message":"` + strings.Repeat("é", 600) + `"}}`, codeUpstreamError, strings.Repeat("é", 512) + "..."},
	} {
		code, msg := upstreamError([]byte(tc.body), 502)
		assert.Equal(t, tc.code, code, tc.body)
		assert.Equal(t, tc.msg, msg, tc.body)
	}
}
