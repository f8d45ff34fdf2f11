package frontend

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Streamed chat parses with the OpenAI client: the first delta names the
// role, one token per chunk, the last chunk has the finish reason, and the
// usage chunk comes when asked for.
func TestStreamingChat(t *testing.T) {
	f := newFleet(t)
	cli := f.client(dec, decStr, "x-dynamo-prefill-instance-id", preStr)
	p := chatParams(disaggModel, 6)
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := cli.Chat.Completions.NewStreaming(context.Background(), p)
	defer stream.Close()

	var text strings.Builder
	var chunks []openai.ChatCompletionChunk
	for stream.Next() {
		c := stream.Current()
		chunks = append(chunks, c)
		assert.Equal(t, disaggModel, c.Model)
		assert.Equal(t, "chat.completion.chunk", string(c.Object))
		if len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	require.Len(t, chunks, 8, "6 tokens, the finish chunk, the usage chunk")
	assert.Equal(t, "assistant", chunks[0].Choices[0].Delta.Role)
	assert.Len(t, strings.Fields(text.String()), 6)
	assert.Equal(t, "length", chunks[6].Choices[0].FinishReason)
	assert.Empty(t, chunks[7].Choices)
	assert.Equal(t, int64(6), chunks[7].Usage.CompletionTokens)
	assert.Equal(t, int64(9), chunks[7].Usage.PromptTokens)
}

// On the wire: an event stream of data lines ending with [DONE].
func TestStreamWireFormat(t *testing.T) {
	f := newFleet(t)
	for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
		body := `{"model":"llama-agg","max_tokens":3,"stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi there"}]}],"prompt":"hi there"}`
		req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set(dec, "5")
		resp, err := f.srv.Client().Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()

		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		assert.Equal(t, "5", resp.Header.Get(HeaderWorker))
		events := strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n")
		require.Len(t, events, 5, "3 tokens, finish, [DONE]: %s", raw)
		for _, e := range events {
			assert.True(t, strings.HasPrefix(e, "data: "), e)
		}
		assert.Equal(t, "data: [DONE]", events[4])
		assert.True(t, strings.HasSuffix(string(raw), "data: [DONE]\n\n"))
	}
}

func TestStreamingCompletions(t *testing.T) {
	f := newFleet(t)
	cli := f.client(dec, "5")
	stream := cli.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(aggModel),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("hello")},
		MaxTokens: openai.Int(4),
	})
	defer stream.Close()
	var text strings.Builder
	var last string
	for stream.Next() {
		c := stream.Current()
		text.WriteString(c.Choices[0].Text)
		last = string(c.Choices[0].FinishReason)
	}
	require.NoError(t, stream.Err())
	assert.Len(t, strings.Fields(text.String()), 4)
	assert.Equal(t, "length", last)
}
