package frontend

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/worker"
)

const dec = "x-dynamo-worker-instance-id"

var (
	decStr = strconv.FormatUint(decodeID, 10)
	preStr = strconv.FormatUint(prefillID, 10)
)

// A pinned disaggregated request: the prefill worker prefills the prompt
// on its pinned rank, then the decode worker decodes on its pinned rank
// without prefilling again.
func TestDisaggregatedPinned(t *testing.T) {
	f := newFleet(t)
	var httpResp *http.Response
	cli := f.client(dec, decStr, "x-dynamo-dp-rank", "3",
		"x-dynamo-prefill-instance-id", preStr, "x-dynamo-prefill-dp-rank", "1")
	res, err := cli.Chat.Completions.New(context.Background(), chatParams(disaggModel, 5), responseInto(&httpResp))
	require.NoError(t, err)

	require.Len(t, res.Choices, 1)
	assert.Len(t, strings.Fields(res.Choices[0].Message.Content), 5, "one word per token")
	assert.Equal(t, "assistant", string(res.Choices[0].Message.Role))
	assert.Equal(t, "length", res.Choices[0].FinishReason)
	assert.Equal(t, disaggModel, res.Model)
	assert.Equal(t, "chat.completion", string(res.Object))
	assert.Equal(t, int64(9), res.Usage.PromptTokens, "(2+5 words)*4/3")
	assert.Equal(t, int64(5), res.Usage.CompletionTokens)
	assert.Equal(t, int64(14), res.Usage.TotalTokens)
	assert.Equal(t, decStr, httpResp.Header.Get(HeaderWorker))
	assert.Equal(t, preStr, httpResp.Header.Get(HeaderPrefillWorker))

	pre, d := f.worker(prefillID), f.worker(decodeID)
	assert.Equal(t, []uint32{1}, pre.rec.ranks(), "prefill ran on prefill rank 1")
	assert.Equal(t, []uint32{3}, d.rec.ranks(), "decode ran on rank 3")
	assert.Equal(t, uint64(9), pre.rec.first(1).ActivePrefillTokens, "the prefill worker prefilled")
	assert.Zero(t, d.rec.first(3).ActivePrefillTokens, "the decode worker got the KV")
	assert.Empty(t, f.worker(aggID).rec.ranks())
	assert.Equal(t, worker.Load{}, d.w.Load(3))
}

// Without prefill workers for the model only the decode pin counts: the
// worker does everything, and a stray prefill pin is ignored.
func TestAggregatedPath(t *testing.T) {
	f := newFleet(t)
	var httpResp *http.Response
	cli := f.client(dec, "5", "x-dynamo-prefill-instance-id", preStr)
	res, err := cli.Chat.Completions.New(context.Background(), chatParams(aggModel, 3), responseInto(&httpResp))
	require.NoError(t, err)
	assert.Len(t, strings.Fields(res.Choices[0].Message.Content), 3)
	assert.Equal(t, aggModel, res.Model)
	assert.Equal(t, "5", httpResp.Header.Get(HeaderWorker))
	assert.Empty(t, httpResp.Header.Get(HeaderPrefillWorker))
	assert.Equal(t, uint64(9), f.worker(aggID).rec.first(0).ActivePrefillTokens, "it prefilled itself")
	assert.Empty(t, f.worker(prefillID).rec.ranks())
}

// The pin headers as the frontend reads them.
func TestReadPins(t *testing.T) {
	h := http.Header{}
	assert.Equal(t, pins{}, readPins(h), "absent: no pins, ranks 0")

	h.Set("X-Dynamo-Worker-Instance-Id", "0x2a")
	h.Set("X-Dynamo-Prefill-Instance-Id", "2a")
	h.Set("X-Dynamo-Dp-Rank", "4294967295")
	h.Set("X-Dynamo-Prefill-Dp-Rank", "-1")
	assert.Equal(t, pins{}, readPins(h), "hex ids are absent; u32::MAX is unset; junk is ignored")

	h = http.Header{}
	h.Set("X-Worker-Instance-Id", "42")
	h.Set("X-Prefill-Instance-Id", " 7 ")
	h.Set("X-Data-Parallel-Rank", "3")
	h.Set("X-Prefill-Dp-Rank", "2")
	assert.Equal(t, pins{worker: 42, prefill: 7, hasWorker: true, hasPrefill: true, dpRank: 3, prefillDPRank: 2}, readPins(h), "aliases")

	h.Set("X-Dynamo-Worker-Instance-Id", "18446744073709551615")
	h.Set("X-Dynamo-Dp-Rank", "1")
	p := readPins(h)
	assert.Equal(t, uint64(18446744073709551615), p.worker, "x-dynamo-* first")
	assert.Equal(t, uint32(1), p.dpRank)
}

func TestModelsAndHealth(t *testing.T) {
	f := newFleet(t)
	cli := f.client()
	page, err := cli.Models.List(context.Background())
	require.NoError(t, err)
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	assert.Equal(t, []string{disaggModel, aggModel}, ids)

	resp, err := f.srv.Client().Get(f.srv.URL + "/health")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestCompletions(t *testing.T) {
	f := newFleet(t)
	cli := f.client(dec, "5")
	res, err := cli.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(aggModel),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("one two three four five six")},
		MaxTokens: openai.Int(4),
	})
	require.NoError(t, err)
	assert.Len(t, strings.Fields(res.Choices[0].Text), 4)
	assert.Equal(t, "length", string(res.Choices[0].FinishReason))
	assert.Equal(t, int64(8), res.Usage.PromptTokens)

	// Token-id prompts count as they are; max_tokens defaults to 16.
	res, err = cli.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:  openai.CompletionNewParamsModel(aggModel),
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{1, 2, 3}},
	})
	require.NoError(t, err)
	assert.Equal(t, int64(3), res.Usage.PromptTokens)
	assert.Equal(t, int64(16), res.Usage.CompletionTokens)
}
