package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// responsesStream converts a chat completion event stream into the
// Responses API's: response.created and response.in_progress, the
// message item and its output_text part opened, one
// response.output_text.delta per text delta, then the text, part and
// item closed and response.completed (response.incomplete when the
// answer was cut off). Each upstream event's conversion is written and
// flushed as one.
type responsesStream struct {
	resp   response
	itemID string
	seq    int
	// started: the opening events are out. done: the stream has ended,
	// cleanly or with an error event.
	started, done bool
	text          strings.Builder
	finish        string
	usage         *chatUsage
	skip          bool // the rest of an oversized event is being dropped
}

func newResponsesStream(model string, created time.Time) *responsesStream {
	return &responsesStream{resp: newResponse(model, created), itemID: newID("msg_")}
}

func (s *responsesStream) event(send sendFunc, ev []byte, part bool) error {
	switch {
	case s.done:
		return nil
	case part:
		s.skip = true // see anthropicStream.event
		return nil
	case s.skip:
		s.skip = false
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
		return nil
	}
	if len(a.Error) > 0 && string(a.Error) != "null" {
		code, msg := upstreamError(data, http.StatusBadGateway)
		s.broken(send, http.StatusBadGateway, code, msg)
		return errStreamFailed
	}
	buf := s.start(nil)
	if a.Usage != nil {
		s.usage = a.Usage
	}
	if c := a.first(); c != nil {
		if c.Delta.Content != nil && *c.Delta.Content != "" {
			if s.text.Len()+len(*c.Delta.Content) > maxConvertedAnswer {
				s.broken(send, http.StatusBadGateway, codeUpstreamInvalid, "the backend's answer is longer than the gateway converts")
				return errStreamFailed
			}
			s.text.WriteString(*c.Delta.Content)
			buf = s.emit(buf, "response.output_text.delta", map[string]any{
				"item_id": s.itemID, "output_index": 0, "content_index": 0, "delta": *c.Delta.Content, "logprobs": []struct{}{},
			})
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			s.finish = *c.FinishReason
		}
	}
	if len(buf) == 0 {
		return nil
	}
	return send(buf)
}

// end: see anthropicStream.end.
func (s *responsesStream) end(send sendFunc) error {
	switch {
	case s.done:
		return nil
	case s.finish == "":
		s.broken(send, http.StatusBadGateway, codeStreamBroken, "the backend's stream ended before the answer did")
		return errStreamFailed
	}
	return send(s.finishEvents(nil))
}

// broken sends the Responses API's error event.
func (s *responsesStream) broken(send sendFunc, _ int, code, msg string) {
	if s.done {
		return
	}
	s.done = true
	_ = send(s.emit(nil, "error", map[string]any{"code": code, "message": msg, "param": nil}))
}

// emit appends one event; every event carries its type and the stream's
// next sequence number.
func (s *responsesStream) emit(buf []byte, typ string, fields map[string]any) []byte {
	fields["type"] = typ
	fields["sequence_number"] = s.seq
	s.seq++
	return sseEvent(buf, typ, fields)
}

func (s *responsesStream) item(status string, content []responseText) responseMessage {
	return responseMessage{ID: s.itemID, Type: "message", Status: status, Role: "assistant", Content: content}
}

// start opens the response, its message item and the item's text part.
func (s *responsesStream) start(buf []byte) []byte {
	if s.started {
		return buf
	}
	s.started = true
	buf = s.emit(buf, "response.created", map[string]any{"response": s.resp})
	buf = s.emit(buf, "response.in_progress", map[string]any{"response": s.resp})
	buf = s.emit(buf, "response.output_item.added", map[string]any{"output_index": 0, "item": s.item("in_progress", []responseText{})})
	return s.emit(buf, "response.content_part.added", map[string]any{
		"item_id": s.itemID, "output_index": 0, "content_index": 0, "part": outputText(""),
	})
}

// finishEvents closes the text, the part, the item and the response.
func (s *responsesStream) finishEvents(buf []byte) []byte {
	buf = s.start(buf)
	text := s.text.String()
	part := outputText(text)
	s.resp.complete(s.item("", []responseText{part}), s.finish, s.usage)
	item := s.resp.Output[0]
	buf = s.emit(buf, "response.output_text.done", map[string]any{
		"item_id": s.itemID, "output_index": 0, "content_index": 0, "text": text, "logprobs": []struct{}{},
	})
	buf = s.emit(buf, "response.content_part.done", map[string]any{
		"item_id": s.itemID, "output_index": 0, "content_index": 0, "part": part,
	})
	buf = s.emit(buf, "response.output_item.done", map[string]any{"output_index": 0, "item": item})
	done := "response.completed"
	if s.resp.Status == "incomplete" {
		done = "response.incomplete"
	}
	s.done = true
	return s.emit(buf, done, map[string]any{"response": s.resp})
}
