package frontend

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"switchyard/fakefleet/worker"
)

// The OpenAI response objects, only the fields a client reads.

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func usageOf(res worker.Result) *usage {
	return &usage{res.PromptTokens, res.CompletionTokens, res.PromptTokens + res.CompletionTokens}
}

type message struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content,omitempty"`
}

// choice serves chat (Message, Delta) and completions (Text) alike. A nil
// finish reason is sent as null, as on every chunk but the last.
type choice struct {
	Index        int      `json:"index"`
	Message      *message `json:"message,omitempty"`
	Delta        *message `json:"delta,omitempty"`
	Text         *string  `json:"text,omitempty"`
	FinishReason *string  `json:"finish_reason"`
	Logprobs     any      `json:"logprobs"`
}

type completion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
}

// response is one request's identity, shared by all its objects.
type response struct {
	in      input
	id      string
	created int64
}

func (f *Frontend) newResponse(in input) response {
	prefix := "cmpl-"
	if in.api == apiChat {
		prefix = "chatcmpl-"
	}
	return response{in: in, id: prefix + strconv.FormatUint(f.seq.Add(1), 10), created: time.Now().Unix()}
}

func (r response) object(streamed bool) string {
	switch {
	case r.in.api != apiChat:
		return "text_completion"
	case streamed:
		return "chat.completion.chunk"
	}
	return "chat.completion"
}

func (r response) full(text string, res worker.Result) completion {
	c := choice{FinishReason: &res.FinishReason}
	if r.in.api == apiChat {
		c.Message = &message{Role: "assistant", Content: text}
	} else {
		c.Text = &text
	}
	return completion{r.id, r.object(false), r.created, r.in.model, []choice{c}, usageOf(res)}
}

// chunk carries one token; the first chat delta also names the role.
func (r response) chunk(text string, first bool) completion {
	var c choice
	if r.in.api == apiChat {
		c.Delta = &message{Content: text}
		if first {
			c.Delta.Role = "assistant"
		}
	} else {
		c.Text = &text
	}
	return completion{r.id, r.object(true), r.created, r.in.model, []choice{c}, nil}
}

// last is the chunk that carries the finish reason and no text.
func (r response) last(reason string) completion {
	c := choice{FinishReason: &reason}
	if r.in.api == apiChat {
		c.Delta = &message{}
	} else {
		empty := ""
		c.Text = &empty
	}
	return completion{r.id, r.object(true), r.created, r.in.model, []choice{c}, nil}
}

// usageChunk is the stream_options.include_usage chunk: no choices.
func (r response) usageChunk(res worker.Result) completion {
	return completion{r.id, r.object(true), r.created, r.in.model, []choice{}, usageOf(res)}
}

func (f *Frontend) buffered(w http.ResponseWriter, r *http.Request, in input, pl plan) {
	resp := f.newResponse(in)
	if text, res, ok := f.generateAll(w, r, in, pl); ok {
		writeJSON(w, http.StatusOK, resp.full(text, res))
	}
}

// generateAll runs the request to its end and returns its whole text;
// false when it failed (and was answered).
func (f *Frontend) generateAll(w http.ResponseWriter, r *http.Request, in input, pl plan) (string, worker.Result, bool) {
	var text strings.Builder
	res, err := f.generate(r.Context(), pl, in, func(s string) error {
		text.WriteString(s)
		return nil
	})
	if err != nil {
		f.failed(w, r, err)
		return "", res, false
	}
	return text.String(), res, true
}

// failed answers a worker failure, unless the client is gone: then there
// is nobody to answer and the worker has already let go.
func (f *Frontend) failed(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		f.log.Debug("fake frontend: client went away", "error", err)
		return
	}
	aerr := answer(err)
	f.log.Info("fake frontend: generation failed", "status", aerr.status, "error", aerr.msg)
	writeError(w, aerr)
}
