package outputcount

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chatStream is a streamed chat completion as Dynamo's frontend sends it:
// a role and a token in the first chunk, one token per chunk, a closing
// chunk with the finish reason and no text, the usage chunk, [DONE].
func chatStream(tokens int, usage int) string {
	var b strings.Builder
	for i := range tokens {
		role := ""
		if i == 0 {
			role = `"role":"assistant",`
		}
		fmt.Fprintf(&b, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{%s\"content\":\"tok%d \"},\"finish_reason\":null,\"logprobs\":null}]}\n\n", role, i)
	}
	b.WriteString("data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
	if usage >= 0 {
		fmt.Fprintf(&b, "data: {\"id\":\"chatcmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", usage, usage+12)
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// count feeds stream in chunks of n bytes and returns the reports.
func count(t *testing.T, stream string, blockSize uint64, n int) ([]uint64, uint64) {
	t.Helper()
	var reports []uint64
	c := New(blockSize, func(tokens uint64) { reports = append(reports, tokens) })
	for len(stream) > 0 {
		k := min(n, len(stream))
		w, err := c.Write([]byte(stream[:k]))
		require.NoError(t, err)
		require.Equal(t, k, w)
		stream = stream[k:]
	}
	return reports, c.Tokens()
}

// One token per chunk with output, reported at each block boundary, not
// per token; the usage count corrects the count at the end.
func TestChatChunksCountAtBlockBoundaries(t *testing.T) {
	reports, tokens := count(t, chatStream(40, -1), 16, 1<<20)
	assert.Equal(t, []uint64{16, 32}, reports)
	assert.Equal(t, uint64(40), tokens)

	// The usage says 50 (several tokens went in some chunks): exact.
	reports, tokens = count(t, chatStream(40, 50), 16, 1<<20)
	assert.Equal(t, []uint64{16, 32, 50}, reports)
	assert.Equal(t, uint64(50), tokens)
}

// Events split anywhere across chunks count the same: every chunk size
// from one byte up.
func TestSplitEventsCountTheSame(t *testing.T) {
	stream := chatStream(37, 37)
	want, _ := count(t, stream, 8, len(stream))
	require.Equal(t, []uint64{8, 16, 24, 32}, want)
	for n := 1; n < 300; n++ {
		got, tokens := count(t, stream, 8, n)
		require.Equal(t, want, got, "chunks of %d bytes", n)
		require.Equal(t, uint64(37), tokens)
	}
}

// Completions chunks carry text; an empty text (the closing chunk) is no
// token. CRLF line ends count the same.
func TestCompletionsText(t *testing.T) {
	var b strings.Builder
	for range 5 {
		b.WriteString("data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\r\n\r\n")
	}
	b.WriteString("data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"stop\"}]}\r\n\r\ndata: [DONE]\r\n\r\n")
	reports, tokens := count(t, b.String(), 2, 7)
	assert.Equal(t, []uint64{2, 4}, reports)
	assert.Equal(t, uint64(5), tokens)
}

// Reasoning and tool calls are output too; role-only and empty deltas
// are not.
func TestReasoningAndToolCalls(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":\"}}]}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"\"}}]}\n\n"
	_, tokens := count(t, stream, 16, 3)
	assert.Equal(t, uint64(2), tokens)
}

// Strings that only look like member names, inside a value, are not
// read as members: an answer about usage counts as one token.
func TestQuotedNamesInsideStrings(t *testing.T) {
	stream := `data: {"choices":[{"delta":{"content":"{\"usage\":{\"completion_tokens\":999}}"}}]}` + "\n\n"
	_, tokens := count(t, stream, 16, 5)
	assert.Equal(t, uint64(1), tokens)
}

// Anthropic's and the Responses API's streams: deltas are steps, their
// usage counts exact.
func TestAnthropicAndResponses(t *testing.T) {
	anthropic := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n"
	for range 3 {
		anthropic += "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n"
	}
	_, tokens := count(t, anthropic, 16, 4)
	assert.Equal(t, uint64(3), tokens)
	_, tokens = count(t, anthropic+"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n", 16, 4)
	assert.Equal(t, uint64(7), tokens)

	responses := ""
	for range 4 {
		responses += "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\",\"delta\":\"y\"}\n\n"
	}
	_, tokens = count(t, responses, 16, 4)
	assert.Equal(t, uint64(4), tokens)
	_, tokens = count(t, responses+"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":6}}}\n\n", 16, 4)
	assert.Equal(t, uint64(6), tokens)
}

// A line past MaxLine is skipped whole; the next one counts again.
func TestLongLineSkipped(t *testing.T) {
	long := `data: {"choices":[{"delta":{"content":"` + strings.Repeat("x", MaxLine) + `"}}]}` + "\n\n"
	_, tokens := count(t, long+chatStream(3, -1), 16, 64<<10)
	assert.Equal(t, uint64(3), tokens)
}

// Nesting past maxDepth skips the line rather than growing any state.
func TestDeepNestingSkipped(t *testing.T) {
	deep := "data: " + strings.Repeat("[", 1000) + "\n\n"
	_, tokens := count(t, deep+chatStream(2, -1), 16, 10)
	assert.Equal(t, uint64(2), tokens)
}

// A usage count is capped: no overflow.
func TestHugeUsage(t *testing.T) {
	_, tokens := count(t, `data: {"usage":{"completion_tokens":99999999999999999999999999999}}`+"\n", 16, 3)
	assert.Equal(t, uint64(maxCount), tokens)
}

// Whatever the bytes and however they are split, the counter does not
// panic, reports strictly increasing counts at growing block boundaries,
// and counts the same as when the stream comes whole.
func FuzzCounter(f *testing.F) {
	f.Add([]byte(chatStream(5, 5)), uint16(2), uint16(3))
	f.Add([]byte("data: {\"type\":\"content_block_delta\"}\ndata: {\"usage\":{\"output_tokens\":4}}\n"), uint16(1), uint16(1))
	f.Add([]byte("data: {\"choices\":[{\"text\":\"\\\"\"}]}\r\n"), uint16(16), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, bs uint16, split uint16) {
		blockSize := uint64(bs)
		run := func(n int) ([]uint64, uint64) {
			var reports []uint64
			c := New(blockSize, func(tokens uint64) {
				if len(reports) > 0 {
					prev := reports[len(reports)-1]
					if tokens/max(blockSize, 1) <= prev/max(blockSize, 1) {
						t.Fatalf("report %d does not cross a block boundary after %d", tokens, prev)
					}
				}
				reports = append(reports, tokens)
			})
			for rest := data; len(rest) > 0; {
				k := min(n, len(rest))
				_, _ = c.Write(rest[:k])
				rest = rest[k:]
			}
			return reports, c.Tokens()
		}
		whole, wholeTokens := run(len(data) + 1)
		parts, partTokens := run(int(split%64) + 1)
		if wholeTokens != partTokens || fmt.Sprint(whole) != fmt.Sprint(parts) {
			t.Fatalf("whole: %v (%d); split: %v (%d)", whole, wholeTokens, parts, partTokens)
		}
	})
}
