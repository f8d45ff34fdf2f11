package frontend

import (
	"encoding/json"
	"errors"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"time"

	"switchyard/fakefleet/worker"
)

// The Responses API (POST /v1/responses). Dynamo's frontend serves it by
// turning the request into a chat completion and the answer back into a
// response object or the Responses event stream; the emulation does the
// same over the fake workers, as far as a text answer goes.

// responsesBody is the part of a Responses request the emulation reads.
type responsesBody struct {
	Model           string          `json:"model"`
	Instructions    json.RawMessage `json:"instructions"`
	Input           json.RawMessage `json:"input"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Stream          bool            `json:"stream"`
}

// toInput sizes the prompt from the instructions and the input's text;
// max_output_tokens takes max_tokens' defaults and bounds.
func (b *responsesBody) toInput() (input, *apiError) {
	texts, err := inputTexts(b.Input)
	if err != nil {
		return input{}, errBadRequest("invalid input: %v", err)
	}
	if b.MaxOutputTokens != nil && *b.MaxOutputTokens < 1 {
		return input{}, errBadRequest("max_output_tokens must be at least 1")
	}
	texts = append(texts, contentText(b.Instructions))
	words := 0
	h := fnv.New64a()
	for _, t := range texts {
		words += countWords(t)
		h.Write([]byte(t))
	}
	c := common{Model: b.Model, MaxTokens: b.MaxOutputTokens, Stream: b.Stream}
	in, aerr := c.toInput(estimate(words))
	in.api, in.promptID = apiResponses, h.Sum64()
	return in, aerr
}

// inputTexts reads a Responses input: a string, or a list of items whose
// content is a string or text parts. Items without content (function
// call outputs, say) carry no text here.
func inputTexts(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("input is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, nil
	}
	var items []struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errors.New("want a string or a list of items")
	}
	texts := make([]string, len(items))
	for i, it := range items {
		texts[i] = contentText(it.Content)
	}
	return texts, nil
}

// responseObject is a Responses API response with one message output.
type responseObject struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"` // "response"
	CreatedAt         int64             `json:"created_at"`
	Status            string            `json:"status"`
	Error             *struct{}         `json:"error"` // null: failures are HTTP errors or error events
	IncompleteDetails *incomplete       `json:"incomplete_details"`
	Model             string            `json:"model"`
	Output            []responseMessage `json:"output"`
	ParallelToolCalls bool              `json:"parallel_tool_calls"`
	ToolChoice        string            `json:"tool_choice"`
	Tools             []struct{}        `json:"tools"`
	Usage             *responseUsage    `json:"usage"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

type responseMessage struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"` // "message"
	Status  string       `json:"status"`
	Role    string       `json:"role"` // "assistant"
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string     `json:"type"` // "output_text"
	Text        string     `json:"text"`
	Annotations []struct{} `json:"annotations"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// responseAnswer is one Responses request's identity and the objects of
// its answer.
type responseAnswer struct {
	model         string
	id, messageID string
	created       int64
}

func (f *Frontend) newResponseAnswer(in input) responseAnswer {
	n := strconv.FormatUint(f.seq.Add(1), 10)
	return responseAnswer{model: in.model, id: "resp_" + n, messageID: "msg_" + n, created: time.Now().Unix()}
}

func newOutputText(text string) outputText {
	return outputText{Type: "output_text", Text: text, Annotations: []struct{}{}}
}

// message is the output item; no content while it is in progress.
func (a responseAnswer) message(status string, content ...outputText) responseMessage {
	if content == nil {
		content = []outputText{}
	}
	return responseMessage{ID: a.messageID, Type: "message", Status: status, Role: "assistant", Content: content}
}

// inProgress is the response the stream opens with: no output yet.
func (a responseAnswer) inProgress() responseObject {
	return responseObject{
		ID: a.id, Object: "response", CreatedAt: a.created, Status: "in_progress", Model: a.model,
		Output: []responseMessage{}, ParallelToolCalls: true, ToolChoice: "auto", Tools: []struct{}{},
	}
}

// final is the finished response: a length finish makes it incomplete,
// as the Responses API reports an answer cut off at max_output_tokens.
func (a responseAnswer) final(text string, res worker.Result) responseObject {
	r := a.inProgress()
	r.Status = "completed"
	if res.FinishReason == "length" {
		r.Status, r.IncompleteDetails = "incomplete", &incomplete{Reason: "max_output_tokens"}
	}
	r.Output = []responseMessage{a.message(r.Status, newOutputText(text))}
	r.Usage = &responseUsage{InputTokens: res.PromptTokens, OutputTokens: res.CompletionTokens,
		TotalTokens: res.PromptTokens + res.CompletionTokens}
	return r
}

func (f *Frontend) bufferedResponse(w http.ResponseWriter, r *http.Request, in input, pl plan) {
	a := f.newResponseAnswer(in)
	if text, res, ok := f.generateAll(w, r, in, pl); ok {
		writeJSON(w, http.StatusOK, a.final(text, res))
	}
}

// responseStream writes the Responses event stream of one answer. Every
// event names its type twice (the event: line and the type field) and
// carries the next sequence number.
type responseStream struct {
	sse
	a      responseAnswer
	seq    int
	opened bool
	text   strings.Builder
}

func (s *responseStream) emit(typ string, fields map[string]any) error {
	fields["type"], fields["sequence_number"] = typ, s.seq
	s.seq++
	return s.named(typ, fields)
}

// part addresses the one output_text part of the one message item.
func (s *responseStream) part(fields map[string]any) map[string]any {
	fields["item_id"], fields["output_index"], fields["content_index"] = s.a.messageID, 0, 0
	return fields
}

// open sends the response, its message item and its text part as begun.
func (s *responseStream) open() error {
	s.opened = true
	for _, typ := range []string{"response.created", "response.in_progress"} {
		if err := s.emit(typ, map[string]any{"response": s.a.inProgress()}); err != nil {
			return err
		}
	}
	if err := s.emit("response.output_item.added", map[string]any{"output_index": 0, "item": s.a.message("in_progress")}); err != nil {
		return err
	}
	return s.emit("response.content_part.added", s.part(map[string]any{"part": newOutputText("")}))
}

func (s *responseStream) delta(text string) error {
	if !s.opened {
		if err := s.open(); err != nil {
			return err
		}
	}
	s.text.WriteString(text)
	return s.emit("response.output_text.delta", s.part(map[string]any{"delta": text, "logprobs": []struct{}{}}))
}

// close sends the text, part and item as done, the final response, and
// the [DONE] Dynamo's frontend ends its event streams with.
func (s *responseStream) close(res worker.Result) error {
	if !s.opened {
		if err := s.open(); err != nil {
			return err
		}
	}
	final := s.a.final(s.text.String(), res)
	text := newOutputText(s.text.String())
	steps := []struct {
		typ    string
		fields map[string]any
	}{
		{"response.output_text.done", s.part(map[string]any{"text": text.Text, "logprobs": []struct{}{}})},
		{"response.content_part.done", s.part(map[string]any{"part": text})},
		{"response.output_item.done", map[string]any{"output_index": 0, "item": final.Output[0]}},
		{"response." + final.Status, map[string]any{"response": final}},
	}
	for _, st := range steps {
		if err := s.emit(st.typ, st.fields); err != nil {
			return err
		}
	}
	return s.raw([]byte("[DONE]"))
}

func (f *Frontend) streamedResponse(w http.ResponseWriter, r *http.Request, in input, pl plan) {
	s := &responseStream{sse: sse{w: w, rc: http.NewResponseController(w)}, a: f.newResponseAnswer(in)}
	res, err := f.generate(r.Context(), pl, in, s.delta)
	switch {
	case err == nil:
		_ = s.close(res)
	case !s.started:
		f.failed(w, r, err)
	case r.Context().Err() == nil:
		// Mid-stream: the status is sent, so the failure travels as an
		// error event and the stream ends without [DONE].
		_ = s.emit("error", map[string]any{"code": "internal_error", "message": answer(err).msg, "param": nil})
	}
}
