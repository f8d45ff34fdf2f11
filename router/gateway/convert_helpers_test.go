package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// mountAnthropic serves the fixture's gateway under /anthropic/ as well,
// as a server mounting Handler at both prefixes does. The original server
// is closed at cleanup, before the fixture's own cleanup closes this one.
func mountAnthropic(f *fixture) {
	mux := http.NewServeMux()
	h := f.gw.Handler()
	mux.Handle("/v1/", h)
	mux.Handle(anthropicPrefix, h)
	old := f.srv
	f.srv = httptest.NewServer(StripDynamoHeaders(mux))
	f.t.Cleanup(old.Close)
}

// sse is one parsed server-sent event.
type sse struct {
	name string
	data string
}

// parseSSE parses an event stream strictly: every event ends with a blank
// line, and every line is an event, data or comment field.
func parseSSE(t *testing.T, body []byte) []sse {
	t.Helper()
	var out []sse
	var cur sse
	var pending bool
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			require.True(t, pending, "an empty event in %q", body)
			out = append(out, cur)
			cur, pending = sse{}, false
		case strings.HasPrefix(line, "event: "):
			cur.name, pending = strings.TrimPrefix(line, "event: "), true
		case strings.HasPrefix(line, "data: "):
			if cur.data != "" {
				cur.data += "\n"
			}
			cur.data, pending = cur.data+strings.TrimPrefix(line, "data: "), true
		case strings.HasPrefix(line, ":"):
		default:
			t.Fatalf("not an SSE line: %q", line)
		}
	}
	require.False(t, pending, "the stream ends inside an event: %q", body)
	return out
}

// names lists the events' names.
func names(evs []sse) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.name
	}
	return out
}

// dataOf decodes an event's data.
func dataOf(t *testing.T, e sse) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(e.data), &m), e.data)
	return m
}

// chatRequestOf decodes what a shim received as a chat body.
func chatRequestOf(t *testing.T, r recorded) map[string]any {
	t.Helper()
	require.Equal(t, pathChat, r.Path)
	return jsonOf(t, r.Body)
}

// messagesOf lists a chat body's messages.
func messagesOf(t *testing.T, body map[string]any) []map[string]any {
	t.Helper()
	raw, ok := body["messages"].([]any)
	require.True(t, ok, "messages: %v", body["messages"])
	out := make([]map[string]any, len(raw))
	for i, m := range raw {
		out[i] = m.(map[string]any)
	}
	return out
}

// writeChunks answers a chat stream with the given chunks, then [DONE].
func writeChunks(w http.ResponseWriter, chunks ...map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, c := range chunks {
		writeEvent(w, c)
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
}

// toolChunk is a chunk carrying tool call fragments.
func toolChunk(calls ...map[string]any) map[string]any {
	return map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
		"choices": []any{map[string]any{"index": 0, "finish_reason": nil, "delta": map[string]any{"tool_calls": calls}}}}
}

func finishChunk(reason string) map[string]any {
	return map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
		"choices": []any{map[string]any{"index": 0, "finish_reason": reason, "delta": map[string]any{}}}}
}

func usageChunk(prompt, completion int) map[string]any {
	return map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "choices": []any{},
		"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}
}
