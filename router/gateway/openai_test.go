package gateway

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/discovery"
	"switchyard/router/metrics"
)

const (
	clientModel  = "qwen3-32b"
	dynamoModel  = "Qwen/Qwen3-32B"
	plainModel   = "llama-3-8b"
	internalOnly = "embedder"
)

// A disaggregated pair through a shim, with the real OpenAI client: the
// picker matches on the model_map'd name while the shim gets the client's
// model id; pins are decimal, the rank header goes out only where the card
// declares data parallelism (rank 0 included); client pins, x-dynamo-*
// headers and nvext.token_data never reach the shim; nothing x-dynamo
// comes back; x-backend asks for disclosure.
func TestOpenAIChatThroughShimPair(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel))
	cfg.Dynamo.Shim.ModelMap = map[string]string{clientModel: dynamoModel}
	f := newFixture(t, cfg, []*discovery.Worker{
		withDP(worker("dynamo", prefillID, discovery.RolePrefill, dynamoModel), 0),
		worker("dynamo", decodeID, discovery.RoleDecode, dynamoModel),
	})

	var httpResp *http.Response
	cli := f.client(
		option.WithHeader("x-backend", ""),
		option.WithHeader("X-Dynamo-Worker-Instance-Id", "1"),
		option.WithHeader("x-DYNAMO-prefill-instance-id", "2"),
		option.WithHeader("X-Worker-Instance-Id", "3"),
		option.WithHeader("X-Request-Id", "req-7"),
		option.WithJSONSet("nvext", map[string]any{"token_data": []int{1, 2, 3}, "annotations": []string{"keep-me"}}),
		option.WithResponseInto(&httpResp),
	)
	res, err := cli.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    clientModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello <b>&</b>")},
	})
	require.NoError(t, err)
	require.Len(t, res.Choices, 1)
	assert.Equal(t, "hello from dyn-a", res.Choices[0].Message.Content)

	// The picker matched on the Dynamo display name.
	req := f.picker.lastPick()
	assert.Equal(t, dynamoModel, req.Model)
	assert.Equal(t, []string{"dynamo"}, req.Namespaces)
	assert.NotZero(t, req.PromptTokens)
	assert.NotZero(t, req.ID)

	got := shim.requests()
	require.Len(t, got, 1)
	assert.Equal(t, pathChat, got[0].Path)
	assert.Equal(t, map[string]string{
		"x-dynamo-worker-instance-id":  strconv.FormatUint(decodeID, 10),
		"x-dynamo-prefill-instance-id": strconv.FormatUint(prefillID, 10),
		"x-dynamo-prefill-dp-rank":     "0",
	}, dynamoHeaders(got[0].Header), "only the picker's pins, decimal; no decode rank without data parallelism")
	assert.Equal(t, "req-7", got[0].Header.Get("X-Request-Id"), "ordinary headers pass")
	assert.Empty(t, got[0].Header.Get("Authorization"), "the client's gateway key stays at the gateway")
	assert.Empty(t, got[0].Header.Values("X-Backend"))

	body := jsonOf(t, got[0].Body)
	assert.Equal(t, clientModel, body["model"], "the outbound body keeps the client's model id")
	assert.Equal(t, map[string]any{"annotations": []any{"keep-me"}}, body["nvext"], "token_data stripped, other nvext kept")
	assert.Contains(t, string(got[0].Body), "<b>&</b>", "a re-encoded body keeps its bytes (no HTML escaping)")

	require.NotNil(t, httpResp)
	assert.Empty(t, dynamoHeaders(httpResp.Header), "no x-dynamo-* header reaches the client")
	assert.Equal(t, "dyn-a", httpResp.Header.Get("X-Switchyard-Backend"), "disclosed, and the upstream's spoof dropped")
	assert.Equal(t, strconv.FormatUint(decodeID, 10), httpResp.Header.Get("X-Switchyard-Worker-Instance-Id"))
	assert.Equal(t, strconv.FormatUint(prefillID, 10), httpResp.Header.Get("X-Switchyard-Prefill-Instance-Id"))

	eventuallyCount(t, f, 1.0, "routing_path", metrics.PathDisaggregated)
	eventuallyCount(t, f, 1.0, "backend", "dyn-a", metrics.ResultOK)
	eventuallyCount(t, f, 1.0, "http", metrics.RouteChatCompletions, "200")
	_, ended := f.picker.counts()
	assert.Zero(t, ended, "a served request is not reported as ended")
}

// Streaming through an aggregated worker with data parallelism declared at
// rank 0: the rank header goes out as "0", there is no prefill pin, events
// arrive one by one, the stream outlives the server's ReadTimeout, and
// without x-backend nothing is disclosed.
func TestOpenAIChatStreamingAggregated(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	shim.setRespond(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, word := range []string{"one ", "two ", "three"} {
			writeEvent(w, chunk(true, clientModel, word, map[bool]string{true: "stop"}[i == 2]))
			time.Sleep(250 * time.Millisecond) // 750ms in all, past the 500ms ReadTimeout
		}
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	})
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel)), []*discovery.Worker{
		withDP(worker("dynamo", aggID, discovery.RoleAggregated, clientModel), 0),
	})

	var httpResp *http.Response
	cli := f.client(option.WithResponseInto(&httpResp))
	stream := cli.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:    clientModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("count")},
	})
	var parts []string
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			parts = append(parts, c.Choices[0].Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, []string{"one ", "two ", "three"}, parts)

	got := shim.requests()
	require.Len(t, got, 1)
	assert.Equal(t, map[string]string{
		"x-dynamo-worker-instance-id": strconv.FormatUint(aggID, 10),
		"x-dynamo-dp-rank":            "0",
	}, dynamoHeaders(got[0].Header))
	assert.Equal(t, "text/event-stream", got[0].Header.Get("Accept"))
	assert.Equal(t, true, jsonOf(t, got[0].Body)["stream"])

	assert.Empty(t, dynamoHeaders(httpResp.Header))
	assert.Empty(t, httpResp.Header.Get("X-Switchyard-Backend"), "no disclosure without x-backend")
	assert.Empty(t, httpResp.Header.Get("X-Switchyard-Worker-Instance-Id"))
	eventuallyCount(t, f, 1.0, "routing_path", metrics.PathAggregated)
}

// A non-zero rank on both sides of a pair.
func TestPinsCarryDeclaredRanks(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel)), []*discovery.Worker{
		withDP(worker("dynamo", prefillID, discovery.RolePrefill, clientModel), 3),
		withDP(worker("dynamo", decodeID, discovery.RoleDecode, clientModel), 5),
	})
	resp, body := f.post(pathChat, chatBody(clientModel, false), nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	assert.Equal(t, map[string]string{
		"x-dynamo-worker-instance-id":  strconv.FormatUint(decodeID, 10),
		"x-dynamo-dp-rank":             "5",
		"x-dynamo-prefill-instance-id": strconv.FormatUint(prefillID, 10),
		"x-dynamo-prefill-dp-rank":     "3",
	}, dynamoHeaders(shim.requests()[0].Header))
}

// Text completions, buffered and streamed, pinned and unified; the models
// list; no Dynamo routing when the picker finds no worker.
func TestOpenAICompletionsAndModels(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	vllm := newUpstream(t, "vllm")
	hidden := newUpstream(t, "hidden")
	off := newUpstream(t, "off")
	internal := backendFor(hidden, internalOnly)
	internal.Internal = true
	disabled := backendFor(off, "retired-model")
	disabled.Enabled = new(bool)
	cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel), backendFor(vllm, plainModel), internal, disabled)
	cfg.Dynamo.Shim.ModelMap = map[string]string{clientModel: dynamoModel, "qwen-alias": dynamoModel}
	f := newFixture(t, cfg, []*discovery.Worker{
		worker("dynamo", aggID, discovery.RoleAggregated, dynamoModel),
		worker("dynamo", decodeID, discovery.RoleDecode, "unmapped/dynamo-model"),
		worker("dynamo", prefillID, discovery.RolePrefill, "prefill-only/model"),
	})
	cli := f.client(option.WithHeader("x-backend", "please"))

	// Pinned, buffered.
	var httpResp *http.Response
	res, err := cli.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:  clientModel,
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
	}, option.WithResponseInto(&httpResp))
	require.NoError(t, err)
	assert.Equal(t, "hello from dyn-a", res.Choices[0].Text)
	assert.Equal(t, pathCompletion, shim.requests()[0].Path)
	assert.Equal(t, strconv.FormatUint(aggID, 10), shim.requests()[0].Header.Get(hdrWorkerID))
	assert.Equal(t, strconv.FormatUint(aggID, 10), httpResp.Header.Get("X-Switchyard-Worker-Instance-Id"))
	assert.Empty(t, httpResp.Header.Get("X-Switchyard-Prefill-Instance-Id"))

	// Unified, streamed: the picker is asked, finds nothing, and the
	// request goes to the backend listing the model, without pins.
	stream := cli.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model:  plainModel,
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"a", "b"}},
	}, option.WithResponseInto(&httpResp))
	var text strings.Builder
	for stream.Next() {
		text.WriteString(stream.Current().Choices[0].Text)
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, "hello from vllm", text.String())
	require.Len(t, vllm.requests(), 1)
	assert.Empty(t, dynamoHeaders(vllm.requests()[0].Header))
	assert.Equal(t, "vllm", httpResp.Header.Get("X-Switchyard-Backend"))
	assert.Empty(t, httpResp.Header.Get("X-Switchyard-Worker-Instance-Id"))
	assert.Equal(t, plainModel, f.picker.lastPick().Model)
	eventuallyCount(t, f, 1.0, "routing_path", metrics.PathUnified)

	page, err := cli.Models.List(context.Background())
	require.NoError(t, err)
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	assert.Equal(t, []string{"llama-3-8b", "qwen-alias", "qwen3-32b", "unmapped/dynamo-model"}, ids,
		"backends' models plus Dynamo models (mapped back through model_map); no internal, disabled or prefill-only models")

	// Pre-tokenized prompts count as tokens.
	_, err = cli.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:  clientModel,
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{1, 2, 3, 4, 5, 6, 7}},
	})
	require.NoError(t, err)
	assert.Equal(t, uint64(7), f.picker.lastPick().PromptTokens)
}

// Without Dynamo (or without disaggregated serving) nothing is pinned,
// and a shim backend that lists the model is an ordinary unified backend.
func TestNoPinningWhenDynamoIsOff(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel))
	cfg.DisaggregatedServing.Enabled = false
	f := newFixture(t, cfg, []*discovery.Worker{worker("dynamo", aggID, discovery.RoleAggregated, clientModel)})
	resp, body := f.post(pathChat, chatBody(clientModel, false), http.Header{"X-Dynamo-Worker-Instance-Id": {"42"}})
	require.Equal(t, 200, resp.StatusCode, string(body))
	picks, _ := f.picker.counts()
	assert.Zero(t, picks)
	assert.Empty(t, dynamoHeaders(shim.requests()[0].Header), "and client pins are stripped all the same")
	eventuallyCount(t, f, 1.0, "routing_path", metrics.PathUnified)
}
