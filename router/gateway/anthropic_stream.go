package gateway

import (
	"encoding/json"
	"net/http"
)

// anthropicStream converts a chat completion event stream into a Messages
// event stream: message_start, then per content block a
// content_block_start, its deltas and a content_block_stop, then
// message_delta (stop reason, usage) and message_stop. Each upstream
// event's conversion is written and flushed as one.
type anthropicStream struct {
	chat *anthropicChat
	id   string
	// started: message_start is out. done: the stream has ended, cleanly
	// or with an error event, and nothing more is written.
	started, done bool
	// open is the index of the open content block, -1 when none; next is
	// the index the next block gets.
	open, next int
	// inTool: the open block is a tool_use continuing chat tool call tool.
	inTool bool
	tool   int
	// closed are the chat tool calls whose block has been closed: a late
	// fragment of one cannot be delivered, as blocks do not reopen.
	closed map[int]bool
	// finish and stopReason are the chat answer's, once it gives them.
	finish     string
	stopReason json.RawMessage
	usage      chatUsage
	// skip: the rest of an oversized event is being dropped.
	skip bool
}

func newAnthropicStream(chat *anthropicChat) *anthropicStream {
	return &anthropicStream{chat: chat, id: newID("msg_"), open: -1, closed: map[int]bool{}}
}

func (s *anthropicStream) event(send sendFunc, ev []byte, part bool) error {
	switch {
	case s.done:
		return nil
	case part:
		// An event too long to hold, or cut off by the stream's end: no
		// chunk is ever that long, and half of one cannot be decoded.
		s.skip = true
		return nil
	case s.skip:
		s.skip = false // the tail of the dropped event
		return nil
	}
	data, ok := sseData(ev)
	if !ok {
		return nil
	}
	if isDone(data) {
		return send(s.finishEvents(nil))
	}
	var a chatAnswer
	if json.Unmarshal(data, &a) != nil {
		return nil // not a chunk (a comment-like line, a keep-alive)
	}
	if len(a.Error) > 0 && string(a.Error) != "null" {
		// An error inside an opened stream (a frontend's mid-stream
		// failure): the client gets it as Anthropic's error event.
		_, msg := upstreamError(data, http.StatusBadGateway)
		s.broken(send, http.StatusBadGateway, codeUpstreamError, msg)
		return errStreamFailed
	}
	buf := s.start(nil)
	if a.Usage != nil {
		s.usage = *a.Usage
	}
	if c := a.first(); c != nil {
		if c.Delta.Content != nil && *c.Delta.Content != "" {
			buf = s.text(buf, *c.Delta.Content)
		}
		for i := range c.Delta.ToolCalls {
			buf = s.toolCall(buf, &c.Delta.ToolCalls[i])
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			s.finish, s.stopReason = *c.FinishReason, c.StopReason
		}
	}
	if len(buf) == 0 {
		return nil
	}
	return send(buf)
}

// end closes a stream whose upstream ended without [DONE]: normally when
// the answer said how it finished, else with an error event, since the
// answer was cut short.
func (s *anthropicStream) end(send sendFunc) error {
	switch {
	case s.done:
		return nil
	case s.finish == "":
		s.broken(send, http.StatusBadGateway, codeStreamBroken, "the backend's stream ended before the answer did")
		return errStreamFailed
	}
	return send(s.finishEvents(nil))
}

func (s *anthropicStream) broken(send sendFunc, status int, code, msg string) {
	if s.done {
		return
	}
	s.done = true
	_ = send(sseEvent(nil, "error", anthropicErrorOf(status, code, msg)))
}

// start opens the message, once.
func (s *anthropicStream) start(buf []byte) []byte {
	if s.started {
		return buf
	}
	s.started = true
	return sseEvent(buf, "message_start", map[string]any{
		"type": "message_start",
		// Input tokens are not known until the chat answer's usage
		// chunk; message_delta reports them.
		"message": anthropicMessage{ID: s.id, Type: "message", Role: "assistant", Model: s.chat.model, Content: []any{}},
	})
}

func (s *anthropicStream) text(buf []byte, t string) []byte {
	if s.open < 0 || s.inTool {
		buf = s.closeBlock(buf)
		buf = s.openBlock(buf, anthropicText{Type: "text"})
	}
	return sseEvent(buf, "content_block_delta", map[string]any{
		"type": "content_block_delta", "index": s.open, "delta": map[string]string{"type": "text_delta", "text": t},
	})
}

// toolCall continues the open tool_use block or opens one for a new call.
func (s *anthropicStream) toolCall(buf []byte, tc *chatCallPart) []byte {
	if s.open < 0 || !s.inTool || s.tool != tc.Index {
		if s.closed[tc.Index] {
			return buf
		}
		buf = s.closeBlock(buf)
		buf = s.openBlock(buf, anthropicToolUse{Type: "tool_use", ID: toolUseID(tc.ID), Name: tc.Function.Name, Input: json.RawMessage("{}")})
		s.inTool, s.tool = true, tc.Index
	}
	if args := tc.arguments(); args != "" {
		buf = sseEvent(buf, "content_block_delta", map[string]any{
			"type": "content_block_delta", "index": s.open, "delta": map[string]string{"type": "input_json_delta", "partial_json": args},
		})
	}
	return buf
}

func (s *anthropicStream) openBlock(buf []byte, block any) []byte {
	s.open, s.next, s.inTool = s.next, s.next+1, false
	return sseEvent(buf, "content_block_start", map[string]any{"type": "content_block_start", "index": s.open, "content_block": block})
}

func (s *anthropicStream) closeBlock(buf []byte) []byte {
	if s.open < 0 {
		return buf
	}
	if s.inTool {
		s.closed[s.tool] = true
	}
	buf = sseEvent(buf, "content_block_stop", map[string]any{"type": "content_block_stop", "index": s.open})
	s.open, s.inTool = -1, false
	return buf
}

// finishEvents ends the message: the open block, the stop reason and
// usage, message_stop.
func (s *anthropicStream) finishEvents(buf []byte) []byte {
	buf = s.start(buf)
	buf = s.closeBlock(buf)
	reason, seq := anthropicStop(s.finish, s.stopReason, s.chat.stops)
	buf = sseEvent(buf, "message_delta", map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
		"usage": map[string]int64{"input_tokens": max(s.usage.PromptTokens, 0), "output_tokens": max(s.usage.CompletionTokens, 0)},
	})
	s.done = true
	return sseEvent(buf, "message_stop", map[string]string{"type": "message_stop"})
}
