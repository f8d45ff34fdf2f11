package frontend

import (
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
)

const (
	maxBody          = 8 << 20
	defaultMaxTokens = 16
	maxMaxTokens     = 4096
)

// api is the OpenAI API a request came in on, which decides the shape of
// its answer.
type api int

const (
	apiCompletions api = iota // text_completion objects
	apiChat                   // chat.completion objects
	apiResponses              // Responses API response objects and events
)

// input is what serving needs from any endpoint's body.
type input struct {
	api          api
	model        string
	promptTokens int
	promptID     uint64 // FNV-1a of the prompt text
	// raw is the request body; tokens the prompt's ids when the frontend
	// tokenized it (see Frontend.UsePrompts).
	raw          []byte
	tokens       []uint32
	maxTokens    int
	stream       bool
	includeUsage bool
}

// common are the fields every endpoint shares.
type common struct {
	Model               string `json:"model"`
	MaxTokens           *int   `json:"max_tokens"`
	MaxCompletionTokens *int   `json:"max_completion_tokens"`
	Stream              bool   `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatBody struct {
	common
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

type completionBody struct {
	common
	Prompt json.RawMessage `json:"prompt"`
}

// decodeBody reads the body (at most maxBody) into v and returns its bytes.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) ([]byte, *apiError) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return nil, errBadRequest("invalid request body: %v", err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, errBadRequest("invalid request body: %v", err)
	}
	return raw, nil
}

// toInput checks the shared fields and fills in max_tokens: the newer
// max_completion_tokens wins, 16 by default, at most 4096.
func (c common) toInput(promptTokens int) (input, *apiError) {
	in := input{model: c.Model, promptTokens: promptTokens, maxTokens: defaultMaxTokens, stream: c.Stream}
	if c.Model == "" {
		return in, errBadRequest("model is required")
	}
	switch {
	case c.MaxCompletionTokens != nil:
		in.maxTokens = *c.MaxCompletionTokens
	case c.MaxTokens != nil:
		in.maxTokens = *c.MaxTokens
	}
	if in.maxTokens < 1 {
		return in, errBadRequest("max_tokens must be at least 1")
	}
	in.maxTokens = min(in.maxTokens, maxMaxTokens)
	in.includeUsage = c.StreamOptions != nil && c.StreamOptions.IncludeUsage
	return in, nil
}

func (b *chatBody) toInput() (input, *apiError) {
	if len(b.Messages) == 0 {
		return input{}, errBadRequest("messages must not be empty")
	}
	words := 0
	h := fnv.New64a()
	for _, m := range b.Messages {
		text := contentText(m.Content)
		words += countWords(text)
		h.Write([]byte(text))
	}
	in, err := b.common.toInput(estimate(words))
	in.api, in.promptID = apiChat, h.Sum64()
	return in, err
}

func (b *completionBody) toInput() (input, *apiError) {
	n, err := promptTokens(b.Prompt)
	if err != nil {
		return input{}, errBadRequest("invalid prompt: %v", err)
	}
	in, aerr := b.common.toInput(n)
	h := fnv.New64a()
	h.Write(b.Prompt)
	in.promptID = h.Sum64()
	return in, aerr
}

// contentText is a chat message's text: a string, or the text parts of a
// list of content parts. Anything else carries no text.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	texts := make([]string, len(parts))
	for i, p := range parts {
		texts[i] = p.Text
	}
	return strings.Join(texts, " ")
}

// promptTokens sizes a completions prompt: text is estimated, token arrays
// count as they are.
func promptTokens(raw json.RawMessage) (int, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return estimate(countWords(s)), nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		words := 0
		for _, s := range ss {
			words += countWords(s)
		}
		return estimate(words), nil
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		return max(len(ids), 1), nil
	}
	var batches [][]int
	if json.Unmarshal(raw, &batches) == nil {
		n := 0
		for _, b := range batches {
			n += len(b)
		}
		return max(n, 1), nil
	}
	return 0, errors.New("want a string, strings or token ids")
}

func countWords(s string) int { return len(strings.Fields(s)) }

// estimate stands in for a tokenizer: about four tokens per three words,
// and never an empty prompt.
func estimate(words int) int { return max(words*4/3, 1) }
