package gateway

import (
	"encoding/json"
	"strings"
)

// responsesFields are the request members the conversion reads. Members
// needing server-side state or tools are read only to refuse them: a
// converted request cannot honour them, and dropping them would answer a
// different question. Any other member (store, reasoning, metadata,
// truncation, ...) is dropped.
var responsesFields = []string{"model", "input", "instructions", "max_output_tokens", "temperature", "top_p",
	"stream", "user", "tools", "previous_response_id", "conversation", "prompt", "text"}

// responsesToChat converts a Responses request body (already checked to
// be a JSON object with a model) to a chat completions body. Errors are
// the client's (a *requestError).
func responsesToChat(body []byte) ([]byte, error) {
	top, err := fields(body, "the request body", responsesFields...)
	if err != nil {
		return nil, err
	}
	var req chatRequest
	if req.Model, err = top.required("model", "model"); err != nil {
		return nil, err
	}
	for _, k := range []string{"previous_response_id", "conversation", "prompt"} {
		if !top.absent(k) {
			return nil, unsupported(k, "server-side state")
		}
	}
	if err := refuseTools(top); err != nil {
		return nil, err
	}
	if err := refuseFormats(top); err != nil {
		return nil, err
	}
	if req.MaxTokens, err = top.count("max_output_tokens", "max_output_tokens"); err != nil {
		return nil, err
	}
	if req.Temperature, err = top.number("temperature", "temperature"); err != nil {
		return nil, err
	}
	if req.TopP, err = top.number("top_p", "top_p"); err != nil {
		return nil, err
	}
	if req.User, err = top.str("user", "user"); err != nil {
		return nil, err
	}
	if req.Stream, err = top.boolean("stream", "stream"); err != nil {
		return nil, err
	}
	if req.Stream {
		req.StreamOptions = &chatStreamOptions{IncludeUsage: true}
	}
	instructions, err := top.str("instructions", "instructions")
	if err != nil {
		return nil, err
	}
	if instructions != "" {
		req.Messages = append(req.Messages, chatMessage{Role: "system", Content: instructions})
	}
	msgs, err := responsesInput(top)
	if err != nil {
		return nil, err
	}
	req.Messages = append(req.Messages, msgs...)
	return marshal(req)
}

func refuseTools(top jsonObject) error {
	if top.absent("tools") {
		return nil
	}
	tools, err := elements(top["tools"], "tools", maxListItems, "tools")
	if err != nil {
		return err
	}
	if len(tools) > 0 {
		return unsupported("tools", "tools")
	}
	return nil
}

// refuseFormats refuses structured output (text.format other than text).
func refuseFormats(top jsonObject) error {
	if top.absent("text") {
		return nil
	}
	text, err := fields(top["text"], "text", "format")
	if err != nil || text.absent("format") {
		return err
	}
	format, err := fields(text["format"], "text.format", "type")
	if err != nil {
		return err
	}
	if typ, err := format.str("type", "text.format.type"); err != nil || (typ != "" && typ != "text") {
		return unsupported("text.format", "a structured output format")
	}
	return nil
}

// responsesInput converts input: a string is one user message; items
// are messages with a role and string or part-list content.
func responsesInput(top jsonObject) ([]chatMessage, error) {
	if top.absent("input") {
		return nil, mustBe("input", "a string or an array of input items")
	}
	if isJSONString(top["input"]) {
		var s string
		_ = json.Unmarshal(top["input"], &s)
		return []chatMessage{{Role: "user", Content: s}}, nil
	}
	items, err := elements(top["input"], "input", maxMessages, "input items")
	if err != nil {
		return nil, err
	}
	budget := blockBudget(maxBlocks)
	out := make([]chatMessage, 0, len(items))
	for i, raw := range items {
		m, err := responsesItem(raw, at("input", i), &budget)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func responsesItem(raw json.RawMessage, path string, budget *blockBudget) (chatMessage, error) {
	it, err := fields(raw, path, "type", "role", "content")
	if err != nil {
		return chatMessage{}, err
	}
	typ, err := it.str("type", path+".type")
	if err != nil {
		return chatMessage{}, err
	}
	if typ != "" && typ != "message" {
		return chatMessage{}, unsupported(path, "an input item of type "+quote(typ))
	}
	role, err := it.str("role", path+".role")
	if err != nil {
		return chatMessage{}, err
	}
	switch role {
	case "user", "assistant", "system":
	case "developer":
		role = "system" // chat templates of open models know no developer role
	default:
		return chatMessage{}, mustBe(path+".role", `"user", "assistant", "system" or "developer"`)
	}
	if it.absent("content") {
		return chatMessage{}, mustBe(path+".content", "a string or an array of content parts")
	}
	if isJSONString(it["content"]) {
		var s string
		_ = json.Unmarshal(it["content"], &s)
		return chatMessage{Role: role, Content: s}, nil
	}
	parts, err := responsesParts(it["content"], path+".content", role, budget)
	if err != nil {
		return chatMessage{}, err
	}
	return chatMessage{Role: role, Content: partsContent(role, parts)}, nil
}

// responsesParts converts content parts: text of any kind, and, in user
// messages, images given by URL.
func responsesParts(raw json.RawMessage, path, role string, budget *blockBudget) ([]any, error) {
	els, err := budget.blocks(raw, path)
	if err != nil {
		return nil, err
	}
	parts := make([]any, 0, len(els))
	for i, el := range els {
		pp := at(path, i)
		p, err := fields(el, pp, "type", "text", "refusal", "image_url", "detail")
		if err != nil {
			return nil, err
		}
		typ, err := p.str("type", pp+".type")
		if err != nil {
			return nil, err
		}
		switch typ {
		case "input_text", "output_text", "refusal":
			key := "text"
			if typ == "refusal" {
				key = "refusal"
			}
			t, err := p.str(key, pp+"."+key)
			if err != nil {
				return nil, err
			}
			parts = append(parts, textPart(t))
		case "input_image":
			if role != "user" {
				return nil, unsupported(pp, "an image outside a user message")
			}
			url, err := p.required("image_url", pp+".image_url")
			if err != nil {
				return nil, unsupported(pp, "an image without an image_url")
			}
			if !imageURLAllowed(url) {
				return nil, mustBe(pp+".image_url", "an http, https or data:image URL")
			}
			img := imagePart(url)
			if d, _ := p.str("detail", pp+".detail"); d == "low" || d == "high" || d == "auto" {
				img.ImageURL.Detail = d
			}
			parts = append(parts, img)
		default:
			return nil, unsupported(pp, "a content part of type "+quote(typ))
		}
	}
	return parts, nil
}

// partsContent is a message's chat content: user parts as they are (one
// text part as a plain string); other roles' text joined.
func partsContent(role string, parts []any) any {
	if role == "user" && len(parts) != 1 {
		return parts
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		t, ok := p.(chatTextPart)
		if !ok {
			return parts // a lone user image
		}
		texts = append(texts, t.Text)
	}
	sep := ""
	if role == "system" {
		sep = "\n"
	}
	return strings.Join(texts, sep)
}
