package gateway

import (
	"bytes"
	"encoding/json"
	"slices"
)

// anthropicMessage is a Messages API answer.
type anthropicMessage struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"` // "message"
	Role         string         `json:"role"` // "assistant"
	Model        string         `json:"model"`
	Content      []any          `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        anthropicUsage `json:"usage"`
}

type anthropicUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

type anthropicText struct {
	Type string `json:"type"` // "text"
	Text string `json:"text"`
}

type anthropicToolUse struct {
	Type  string          `json:"type"` // "tool_use"
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// anthropicMessageOf converts a buffered chat completion. The model is
// the one the client asked for (the backend echoes the chat body's, which
// is the same id).
func anthropicMessageOf(completion []byte, chat *anthropicChat) ([]byte, error) {
	a, err := parseCompletion(completion)
	if err != nil {
		return nil, err
	}
	c := a.first()
	m := anthropicMessage{ID: newID("msg_"), Type: "message", Role: "assistant", Model: chat.model, Content: []any{}}
	if c.Message.Content != nil && *c.Message.Content != "" {
		m.Content = append(m.Content, anthropicText{Type: "text", Text: *c.Message.Content})
	}
	for _, tc := range c.Message.ToolCalls {
		m.Content = append(m.Content, anthropicToolUse{Type: "tool_use", ID: toolUseID(tc.ID), Name: tc.Function.Name, Input: toolInput(tc.arguments())})
	}
	reason, seq := anthropicStop(finishOf(c), c.StopReason, chat.stops)
	m.StopReason, m.StopSequence = &reason, seq
	if a.Usage != nil {
		m.Usage = anthropicUsage{InputTokens: max(a.Usage.PromptTokens, 0), OutputTokens: max(a.Usage.CompletionTokens, 0)}
	}
	return marshal(m)
}

func finishOf(c *chatChoice) string {
	if c.FinishReason == nil {
		return ""
	}
	return *c.FinishReason
}

// anthropicStop maps a chat finish_reason to Anthropic's stop_reason. A
// "stop" whose vLLM stop_reason names one of the request's stop
// sequences is a stop_sequence, reported with the sequence.
func anthropicStop(finish string, stopReason json.RawMessage, stops []string) (string, *string) {
	switch finish {
	case "length":
		return "max_tokens", nil
	case "tool_calls", "function_call":
		return "tool_use", nil
	case "content_filter":
		return "refusal", nil
	case "stop":
		var s string
		if json.Unmarshal(stopReason, &s) == nil && slices.Contains(stops, s) {
			return "stop_sequence", &s
		}
	}
	return "end_turn", nil
}

// toolInput is a tool call's arguments as the input object Anthropic
// promises; arguments that are not a JSON object (a model's malformed
// output) become an empty one rather than an invalid answer.
func toolInput(args string) json.RawMessage {
	var c bytes.Buffer
	if isJSONObject(json.RawMessage(args)) && json.Compact(&c, []byte(args)) == nil {
		return c.Bytes()
	}
	return json.RawMessage("{}")
}

// toolUseID keeps the backend's tool call id, which the client sends back
// in its tool_result; a backend that gave none gets one made up.
func toolUseID(id string) string {
	if id == "" {
		return newID("toolu_")
	}
	return id
}
