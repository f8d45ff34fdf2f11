package gateway

import (
	"encoding/json"
	"strings"

	"switchyard/router/jsonvalid"
)

// anthropicChat is an Anthropic Messages request converted to a chat
// completions request, with what the answer's conversion needs.
type anthropicChat struct {
	body   []byte
	model  string
	stream bool
	// stops are the request's stop_sequences: a vLLM stop_reason naming
	// one is reported back as stop_reason "stop_sequence".
	stops []string
}

// anthropicFields are the request members converted; any other (thinking,
// service_tier, container, ...) has no chat counterpart and is dropped.
var anthropicFields = []string{"model", "messages", "system", "max_tokens", "temperature", "top_p", "top_k",
	"stop_sequences", "stream", "tools", "tool_choice", "metadata"}

// anthropicToChat converts a Messages request body. Errors are the
// client's (a *requestError), answered with a 400.
func anthropicToChat(body []byte) (*anthropicChat, error) {
	if !jsonvalid.Valid(body) {
		return nil, &requestError{"the request body must be a JSON object"}
	}
	top, err := fields(body, "the request body", anthropicFields...)
	if err != nil {
		return nil, err
	}
	cv := anthropicConversion{budget: maxBlocks}
	if err := cv.scalars(top); err != nil {
		return nil, err
	}
	if err := cv.system(top); err != nil {
		return nil, err
	}
	if err := cv.messages(top); err != nil {
		return nil, err
	}
	if err := cv.tools(top); err != nil {
		return nil, err
	}
	if err := cv.toolChoice(top); err != nil {
		return nil, err
	}
	b, err := marshal(&cv.req)
	if err != nil {
		return nil, &requestError{"the request could not be converted"}
	}
	return &anthropicChat{body: b, model: cv.req.Model, stream: cv.req.Stream, stops: cv.req.Stop}, nil
}

// anthropicConversion is the chat request being built.
type anthropicConversion struct {
	req    chatRequest
	budget blockBudget
}

// scalars converts the members that map one to one: the model, the
// sampling parameters, stop sequences, streaming and the end user.
func (cv *anthropicConversion) scalars(top jsonObject) error {
	req := &cv.req
	var err error
	if req.Model, err = top.required("model", "model"); err != nil {
		return err
	}
	if top.absent("max_tokens") {
		return mustBe("max_tokens", "a positive integer") // required, as Anthropic requires it
	}
	if req.MaxTokens, err = top.count("max_tokens", "max_tokens"); err != nil {
		return err
	}
	if req.Temperature, err = top.number("temperature", "temperature"); err != nil {
		return err
	}
	if req.TopP, err = top.number("top_p", "top_p"); err != nil {
		return err
	}
	// top_k is not OpenAI's, but vLLM and Dynamo take it as an extension.
	if req.TopK, err = top.count("top_k", "top_k"); err != nil {
		return err
	}
	if req.Stream, err = top.boolean("stream", "stream"); err != nil {
		return err
	}
	if req.Stream {
		req.StreamOptions = &chatStreamOptions{IncludeUsage: true}
	}
	if !top.absent("stop_sequences") {
		if req.Stop, err = stringList(top["stop_sequences"], "stop_sequences"); err != nil {
			return err
		}
	}
	if top.absent("metadata") {
		return nil
	}
	md, err := fields(top["metadata"], "metadata", "user_id")
	if err != nil {
		return err
	}
	req.User, err = md.str("user_id", "metadata.user_id")
	return err
}

// system becomes the leading system message: a string, or text blocks
// joined by newlines.
func (cv *anthropicConversion) system(top jsonObject) error {
	if top.absent("system") {
		return nil
	}
	raw := top["system"]
	var text string
	if isJSONString(raw) {
		_ = json.Unmarshal(raw, &text)
	} else {
		els, err := cv.budget.blocks(raw, "system")
		if err != nil {
			return err
		}
		texts := make([]string, 0, len(els))
		for i, el := range els {
			t, err := textBlock(el, at("system", i))
			if err != nil {
				return err
			}
			texts = append(texts, t)
		}
		text = strings.Join(texts, "\n")
	}
	if text != "" {
		cv.req.Messages = append(cv.req.Messages, chatMessage{Role: "system", Content: text})
	}
	return nil
}

// textBlock reads a block that must be {"type":"text","text":...}.
func textBlock(raw json.RawMessage, path string) (string, error) {
	o, err := fields(raw, path, "type", "text")
	if err != nil {
		return "", err
	}
	if typ, err := o.str("type", path+".type"); err != nil || typ != "text" {
		return "", mustBe(path+".type", `"text"`)
	}
	return o.str("text", path+".text")
}

// messages converts the conversation's turns in order.
func (cv *anthropicConversion) messages(top jsonObject) error {
	if top.absent("messages") {
		return mustBe("messages", "a non-empty array")
	}
	msgs, err := elements(top["messages"], "messages", maxMessages, "messages")
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		return mustBe("messages", "a non-empty array")
	}
	for i, raw := range msgs {
		path := at("messages", i)
		m, err := fields(raw, path, "role", "content")
		if err != nil {
			return err
		}
		role, err := m.str("role", path+".role")
		if err != nil {
			return err
		}
		if m.absent("content") {
			return mustBe(path+".content", "a string or an array of content blocks")
		}
		switch role {
		case "user":
			err = cv.user(m["content"], path+".content")
		case "assistant":
			err = cv.assistant(m["content"], path+".content")
		default:
			err = mustBe(path+".role", `"user" or "assistant"`)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
