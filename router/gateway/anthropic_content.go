package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
)

// user converts a user turn. Its tool results become tool messages,
// which chat completions wants right after the assistant's tool calls,
// so they go first; the turn's text and images follow as one user
// message (with any images the tool results carried, since a tool
// message holds text only).
func (cv *anthropicConversion) user(raw json.RawMessage, path string) error {
	if isJSONString(raw) {
		var s string
		_ = json.Unmarshal(raw, &s)
		cv.req.Messages = append(cv.req.Messages, chatMessage{Role: "user", Content: s})
		return nil
	}
	els, err := cv.budget.blocks(raw, path)
	if err != nil {
		return err
	}
	if len(els) == 0 {
		return mustBe(path, "a string or a non-empty array of content blocks")
	}
	var parts []any
	for i, el := range els {
		bp := at(path, i)
		b, err := fields(el, bp, "type", "text", "source", "tool_use_id", "content")
		if err != nil {
			return err
		}
		typ, err := b.str("type", bp+".type")
		if err != nil {
			return err
		}
		switch typ {
		case "text":
			t, err := b.str("text", bp+".text")
			if err != nil {
				return err
			}
			parts = append(parts, textPart(t))
		case "image":
			url, err := imageSource(b, bp+".source")
			if err != nil {
				return err
			}
			parts = append(parts, imagePart(url))
		case "tool_result":
			images, err := cv.toolResult(b, bp)
			if err != nil {
				return err
			}
			parts = append(parts, images...)
		default:
			return mustBe(bp+".type", `"text", "image" or "tool_result" in a user message`)
		}
	}
	switch {
	case len(parts) == 1:
		if t, ok := parts[0].(chatTextPart); ok {
			cv.req.Messages = append(cv.req.Messages, chatMessage{Role: "user", Content: t.Text})
			return nil
		}
		fallthrough
	case len(parts) > 1:
		cv.req.Messages = append(cv.req.Messages, chatMessage{Role: "user", Content: parts})
	}
	return nil
}

// toolResult adds a tool message answering a tool call; the images in
// its content are returned for the user message.
func (cv *anthropicConversion) toolResult(b jsonObject, path string) ([]any, error) {
	id, err := b.required("tool_use_id", path+".tool_use_id")
	if err != nil {
		return nil, err
	}
	var text string
	var images []any
	switch {
	case b.absent("content"):
	case isJSONString(b["content"]):
		_ = json.Unmarshal(b["content"], &text)
	default:
		els, err := cv.budget.blocks(b["content"], path+".content")
		if err != nil {
			return nil, err
		}
		var texts []string
		for i, el := range els {
			ep := at(path+".content", i)
			o, err := fields(el, ep, "type", "text", "source")
			if err != nil {
				return nil, err
			}
			switch typ, _ := o.str("type", ep+".type"); typ {
			case "text":
				t, err := o.str("text", ep+".text")
				if err != nil {
					return nil, err
				}
				texts = append(texts, t)
			case "image":
				url, err := imageSource(o, ep+".source")
				if err != nil {
					return nil, err
				}
				images = append(images, imagePart(url))
			default:
				return nil, mustBe(ep+".type", `"text" or "image" in a tool result`)
			}
		}
		text = strings.Join(texts, "\n")
	}
	cv.req.Messages = append(cv.req.Messages, chatMessage{Role: "tool", ToolCallID: id, Content: text})
	return images, nil
}

// imageSource is an image block's source as an image URL: inline base64
// data becomes a data: URL, a url source passes if it is a web URL.
func imageSource(b jsonObject, path string) (string, error) {
	if b.absent("source") {
		return "", mustBe(path, "an image source object")
	}
	s, err := fields(b["source"], path, "type", "media_type", "data", "url")
	if err != nil {
		return "", err
	}
	switch typ, _ := s.str("type", path+".type"); typ {
	case "base64":
		mt, err := s.required("media_type", path+".media_type")
		if err != nil {
			return "", err
		}
		if !strings.HasPrefix(mt, "image/") || strings.ContainsAny(mt, ";, \t\r\n") {
			return "", mustBe(path+".media_type", "an image media type")
		}
		data, err := s.required("data", path+".data")
		if err != nil {
			return "", err
		}
		return "data:" + mt + ";base64," + data, nil
	case "url":
		u, err := s.required("url", path+".url")
		if err != nil {
			return "", err
		}
		if !imageURLAllowed(u) || strings.HasPrefix(strings.ToLower(u), "data:") {
			return "", mustBe(path+".url", "an http or https URL")
		}
		return u, nil
	}
	return "", mustBe(path+".type", `"base64" or "url"`)
}

// assistant converts an assistant turn: its text blocks joined, its
// tool_use blocks as tool calls. Thinking blocks are dropped: they are
// signed for Anthropic's models and mean nothing to a chat backend.
func (cv *anthropicConversion) assistant(raw json.RawMessage, path string) error {
	if isJSONString(raw) {
		var s string
		_ = json.Unmarshal(raw, &s)
		cv.req.Messages = append(cv.req.Messages, chatMessage{Role: "assistant", Content: s})
		return nil
	}
	els, err := cv.budget.blocks(raw, path)
	if err != nil {
		return err
	}
	var text strings.Builder
	msg := chatMessage{Role: "assistant"}
	for i, el := range els {
		bp := at(path, i)
		b, err := fields(el, bp, "type", "text", "id", "name", "input")
		if err != nil {
			return err
		}
		typ, err := b.str("type", bp+".type")
		if err != nil {
			return err
		}
		switch typ {
		case "text":
			t, err := b.str("text", bp+".text")
			if err != nil {
				return err
			}
			text.WriteString(t)
		case "tool_use":
			call, err := toolUse(b, bp)
			if err != nil {
				return err
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
		case "thinking", "redacted_thinking":
		default:
			return mustBe(bp+".type", `"text", "tool_use" or "thinking" in an assistant message`)
		}
	}
	if text.Len() > 0 || len(msg.ToolCalls) == 0 {
		msg.Content = text.String()
	}
	cv.req.Messages = append(cv.req.Messages, msg)
	return nil
}

// toolUse is a tool_use block as a chat tool call; its input object
// becomes the arguments text.
func toolUse(b jsonObject, path string) (chatToolCall, error) {
	id, err := b.required("id", path+".id")
	if err != nil {
		return chatToolCall{}, err
	}
	name, err := b.required("name", path+".name")
	if err != nil {
		return chatToolCall{}, err
	}
	args := "{}"
	if !b.absent("input") {
		if !isJSONObject(b["input"]) {
			return chatToolCall{}, mustBe(path+".input", "an object")
		}
		var c bytes.Buffer
		if json.Compact(&c, b["input"]) != nil {
			return chatToolCall{}, mustBe(path+".input", "an object")
		}
		args = c.String()
	}
	return chatToolCall{ID: id, Type: "function", Function: chatFunctionCall{Name: name, Arguments: args}}, nil
}
