package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
)

// The OpenAI chat completions wire, as far as the converters write and
// read it. Requests are built from these types; answers are decoded
// leniently (unknown fields ignored), since they come from our backends.

type chatRequest struct {
	Model             string             `json:"model"`
	Messages          []chatMessage      `json:"messages"`
	MaxTokens         *int64             `json:"max_tokens,omitempty"`
	Temperature       *float64           `json:"temperature,omitempty"`
	TopP              *float64           `json:"top_p,omitempty"`
	TopK              *int64             `json:"top_k,omitempty"`
	Stop              []string           `json:"stop,omitempty"`
	Stream            bool               `json:"stream,omitempty"`
	StreamOptions     *chatStreamOptions `json:"stream_options,omitempty"`
	Tools             []chatTool         `json:"tools,omitempty"`
	ToolChoice        any                `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool              `json:"parallel_tool_calls,omitempty"`
	User              string             `json:"user,omitempty"`
}

// chatStreamOptions asks for a final usage chunk, which the converted
// streams report in their closing events.
type chatStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role string `json:"role"`
	// Content is a string, a []any of parts, or nil (omitted: an
	// assistant message that only calls tools).
	Content    any            `json:"content,omitempty"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatTextPart struct {
	Type string `json:"type"` // "text"
	Text string `json:"text"`
}

type chatImagePart struct {
	Type     string       `json:"type"` // "image_url"
	ImageURL chatImageURL `json:"image_url"`
}

type chatImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

type chatToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"` // "function"
	Function chatFunctionCall `json:"function"`
}

type chatFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string       `json:"type"` // "function"
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

func textPart(s string) chatTextPart { return chatTextPart{Type: "text", Text: s} }

func imagePart(url string) chatImagePart {
	return chatImagePart{Type: "image_url", ImageURL: chatImageURL{URL: url}}
}

// chatAnswer is a chat completion or one chunk of a streamed one.
type chatAnswer struct {
	ID      string       `json:"id"`
	Created int64        `json:"created"`
	Choices []chatChoice `json:"choices"`
	Usage   *chatUsage   `json:"usage"`
	// Error is set on an error event inside a stream.
	Error json.RawMessage `json:"error"`
}

type chatChoice struct {
	Index        int       `json:"index"`
	Message      chatDelta `json:"message"` // a completion's
	Delta        chatDelta `json:"delta"`   // a chunk's
	FinishReason *string   `json:"finish_reason"`
	// StopReason is vLLM's extension: the stop string (or token id) that
	// ended generation, which tells which stop sequence matched.
	StopReason json.RawMessage `json:"stop_reason"`
}

type chatDelta struct {
	Content   *string        `json:"content"`
	ToolCalls []chatCallPart `json:"tool_calls"`
}

// chatCallPart is a tool call, or a fragment of one in a stream (where
// Index says which call it continues).
type chatCallPart struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name string `json:"name"`
		// Arguments is a JSON-encoded string; a few servers send the
		// object itself.
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type chatUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// arguments is a tool call's arguments text, however it was encoded.
func (c *chatCallPart) arguments() string {
	raw := bytes.TrimSpace(c.Function.Arguments)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// first is the choice the converters answer with: index 0, as the
// converted requests never ask for more.
func (a *chatAnswer) first() *chatChoice {
	for i := range a.Choices {
		if a.Choices[i].Index == 0 {
			return &a.Choices[i]
		}
	}
	return nil
}

var errNoChoice = errors.New("it has no choices")

// parseCompletion decodes a buffered chat completion.
func parseCompletion(data []byte) (*chatAnswer, error) {
	var a chatAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, errors.New("it is not a chat completion")
	}
	if a.first() == nil {
		return nil, errNoChoice
	}
	return &a, nil
}

// completionEvents re-encodes a buffered chat completion as the chunk
// stream a streamed answer would have been: one chunk carrying the whole
// message, then [DONE].
func completionEvents(data []byte) ([][]byte, error) {
	a, err := parseCompletion(data)
	if err != nil {
		return nil, err
	}
	c := a.first()
	calls := make([]chatCallPart, len(c.Message.ToolCalls))
	for i, tc := range c.Message.ToolCalls {
		calls[i] = tc
		calls[i].Index = i
		calls[i].Function.Arguments, _ = json.Marshal(tc.arguments())
	}
	chunk := map[string]any{
		"id": a.ID, "created": a.Created,
		"choices": []any{map[string]any{
			"index": 0, "delta": map[string]any{"content": c.Message.Content, "tool_calls": calls},
			"finish_reason": c.FinishReason, "stop_reason": c.StopReason,
		}},
		"usage": a.Usage,
	}
	b, err := marshal(chunk)
	if err != nil {
		return nil, err
	}
	return [][]byte{append(append([]byte("data: "), b...), '\n', '\n'), []byte("data: [DONE]\n\n")}, nil
}

// sseData is the data of one event: its data lines joined by newlines
// (one leading space dropped from each), as an EventSource reads it; ok
// is false for an event without data (a comment, a keep-alive).
func sseData(ev []byte) (data []byte, ok bool) {
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		v, found := bytes.CutPrefix(line, []byte("data:"))
		if !found {
			continue
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if ok {
			data = append(data, '\n')
		}
		data, ok = append(data, v...), true
	}
	return data, ok
}

// sseEvent encodes one named event.
func sseEvent(buf []byte, name string, v any) []byte {
	b, _ := marshal(v) // the converters' own types always encode
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, b...)
	return append(buf, '\n', '\n')
}

// isDone reports the OpenAI stream terminator.
func isDone(data []byte) bool { return string(bytes.TrimSpace(data)) == "[DONE]" }
