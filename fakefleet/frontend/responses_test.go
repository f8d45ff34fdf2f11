package frontend

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func responseParams(model string, maxTokens int64) responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model:           model,
		Instructions:    openai.String("Be brief."),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello to the fleet")},
		MaxOutputTokens: openai.Int(maxTokens),
	}
}

// A pinned disaggregated Responses request runs like a chat completion:
// prefill on the prefill worker, decode on the decode worker, and the
// answer is a response object cut off at max_output_tokens.
func TestResponsesBuffered(t *testing.T) {
	f := newFleet(t)
	var httpResp *http.Response
	cli := f.client(dec, decStr, "x-dynamo-prefill-instance-id", preStr)
	res, err := cli.Responses.New(context.Background(), responseParams(disaggModel, 5), responseInto(&httpResp))
	require.NoError(t, err)

	assert.Equal(t, "response", string(res.Object))
	assert.True(t, strings.HasPrefix(res.ID, "resp_"), res.ID)
	assert.Equal(t, disaggModel, res.Model)
	assert.Len(t, strings.Fields(res.OutputText()), 5, "one word per token")
	assert.Equal(t, responses.ResponseStatusIncomplete, res.Status)
	assert.Equal(t, "max_output_tokens", res.IncompleteDetails.Reason)
	require.Len(t, res.Output, 1)
	assert.Equal(t, "message", res.Output[0].Type)
	assert.Equal(t, int64(9), res.Usage.InputTokens, "(2+5 words)*4/3: instructions and input")
	assert.Equal(t, int64(5), res.Usage.OutputTokens)
	assert.Equal(t, int64(14), res.Usage.TotalTokens)
	assert.Equal(t, preStr, httpResp.Header.Get(HeaderPrefillWorker))
	assert.Equal(t, uint64(9), f.worker(prefillID).rec.first(0).ActivePrefillTokens, "the prefill worker prefilled")
}

// Input items: the text of every message's content counts, strings and
// input_text parts alike.
func TestResponsesInputItems(t *testing.T) {
	f := newFleet(t)
	cli := f.client(dec, "5")
	p := responses.ResponseNewParams{
		Model: aggModel,
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("one two three", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
				responses.ResponseInputContentParamOfInputText("four five six"),
			}, responses.EasyInputMessageRoleUser),
		}},
		MaxOutputTokens: openai.Int(3),
	}
	res, err := cli.Responses.New(context.Background(), p)
	require.NoError(t, err)
	assert.Equal(t, int64(8), res.Usage.InputTokens, "6 words")
	assert.Len(t, strings.Fields(res.OutputText()), 3)
}

// The stream parses with the OpenAI client, in the Responses API's order,
// numbered from 0, and the deltas add up to the final text.
func TestResponsesStreamed(t *testing.T) {
	f := newFleet(t)
	cli := f.client(dec, decStr, "x-dynamo-prefill-instance-id", preStr)
	stream := cli.Responses.NewStreaming(context.Background(), responseParams(disaggModel, 4))
	defer stream.Close()

	var types []string
	var deltas strings.Builder
	var last responses.ResponseStreamEventUnion
	for stream.Next() {
		ev := stream.Current()
		assert.Equal(t, int64(len(types)), ev.SequenceNumber)
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			deltas.WriteString(ev.Delta)
		}
		last = ev
	}
	require.NoError(t, stream.Err())
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete"}
	assert.Equal(t, want, types)
	assert.Len(t, strings.Fields(deltas.String()), 4)
	assert.Equal(t, deltas.String(), last.Response.OutputText())
	assert.Equal(t, int64(4), last.Response.Usage.OutputTokens)
}

// On the wire: named events, then data: [DONE] as Dynamo's frontend ends
// its streams.
func TestResponsesStreamWireFormat(t *testing.T) {
	f := newFleet(t)
	body := `{"model":"llama-agg","max_output_tokens":2,"stream":true,"input":"hi there"}`
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/responses", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set(dec, "5")
	resp, err := f.srv.Client().Do(req)
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()

	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	events := strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n")
	require.Len(t, events, 11, "4 opening, 2 deltas, 4 closing, [DONE]: %s", raw)
	for _, e := range events[:10] {
		lines := strings.Split(e, "\n")
		require.Len(t, lines, 2, e)
		name := strings.TrimPrefix(lines[0], "event: ")
		var data struct{ Type string }
		require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "data: ")), &data), e)
		assert.Equal(t, name, data.Type, "the event line names the data's type")
	}
	assert.Equal(t, "data: [DONE]", events[10])
}

// Refusals and bad bodies answer as on the chat route, before any stream.
func TestResponsesRefusals(t *testing.T) {
	f := newFleet(t)
	cases := []struct {
		name    string
		body    string
		headers []string
		status  int
		msg     string
	}{
		{"no prefill pin", `{"model":"Qwen/Qwen3-0.6B","input":"hi","stream":true}`, []string{dec, decStr},
			http.StatusServiceUnavailable, prefillIDRequired},
		{"no worker pin", `{"model":"llama-agg","input":"hi"}`, nil, http.StatusBadRequest, "Direct routing mode requires"},
		{"no input", `{"model":"llama-agg"}`, []string{dec, "5"}, http.StatusBadRequest, "input is required"},
		{"input of numbers", `{"model":"llama-agg","input":[1,2]}`, []string{dec, "5"}, http.StatusBadRequest, "invalid input"},
		{"zero max_output_tokens", `{"model":"llama-agg","input":"hi","max_output_tokens":0}`, []string{dec, "5"},
			http.StatusBadRequest, "max_output_tokens must be at least 1"},
		{"no model", `{"input":"hi"}`, []string{dec, "5"}, http.StatusBadRequest, "model is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/responses", strings.NewReader(c.body))
			require.NoError(t, err)
			for i := 0; i+1 < len(c.headers); i += 2 {
				req.Header.Set(c.headers[i], c.headers[i+1])
			}
			resp, err := f.srv.Client().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var e errorBody
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
			assert.Equal(t, c.status, resp.StatusCode)
			assert.Contains(t, e.Error.Message, c.msg)
		})
	}
}

// Whatever a client sends, reading a Responses body never panics, and a
// body it accepts has a model, a prompt and a bounded max_tokens.
func FuzzResponsesBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hello there"}`,
		`{"model":"m","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"max_output_tokens":9}`,
		`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"x"}],"stream":true}`,
		`{"model":"m","input":[1],"max_output_tokens":-1}`,
		`{"input":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b responsesBody
		if json.Unmarshal(data, &b) != nil {
			return
		}
		in, err := b.toInput()
		if err != nil {
			return
		}
		if in.model == "" || in.promptTokens < 1 || in.maxTokens < 1 || in.maxTokens > maxMaxTokens || in.api != apiResponses {
			t.Fatalf("accepted %q as %+v", data, in)
		}
	})
}
