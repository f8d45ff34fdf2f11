package gateway

import "time"

// response is a Responses API response object, as far as a converted
// text answer fills it.
type response struct {
	ID                string              `json:"id"`
	Object            string              `json:"object"` // "response"
	CreatedAt         int64               `json:"created_at"`
	Status            string              `json:"status"`
	Error             *struct{}           `json:"error"` // always null: failures are HTTP errors
	IncompleteDetails *responseIncomplete `json:"incomplete_details"`
	Model             string              `json:"model"`
	Output            []responseMessage   `json:"output"`
	ParallelToolCalls bool                `json:"parallel_tool_calls"`
	ToolChoice        string              `json:"tool_choice"`
	Tools             []struct{}          `json:"tools"`
	Usage             *responseUsage      `json:"usage"`
}

type responseIncomplete struct {
	Reason string `json:"reason"`
}

// responseMessage is an output item of type message.
type responseMessage struct {
	ID      string         `json:"id"`
	Type    string         `json:"type"` // "message"
	Status  string         `json:"status"`
	Role    string         `json:"role"` // "assistant"
	Content []responseText `json:"content"`
}

type responseText struct {
	Type        string     `json:"type"` // "output_text"
	Text        string     `json:"text"`
	Annotations []struct{} `json:"annotations"`
}

type responseUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int64 `json:"total_tokens"`
}

// newResponse is a response object in progress, with no output yet.
func newResponse(model string, created time.Time) response {
	return response{
		ID: newID("resp_"), Object: "response", CreatedAt: created.Unix(), Status: "in_progress",
		Model: model, Output: []responseMessage{}, ToolChoice: "auto", Tools: []struct{}{},
	}
}

func outputText(text string) responseText {
	return responseText{Type: "output_text", Text: text, Annotations: []struct{}{}}
}

// complete fills in how the answer ended: a length or content-filter
// finish makes the response incomplete, as the Responses API reports a
// cut-off answer.
func (r *response) complete(item responseMessage, finish string, u *chatUsage) {
	r.Status, item.Status = "completed", "completed"
	switch finish {
	case "length":
		r.IncompleteDetails = &responseIncomplete{Reason: "max_output_tokens"}
	case "content_filter":
		r.IncompleteDetails = &responseIncomplete{Reason: "content_filter"}
	}
	if r.IncompleteDetails != nil {
		r.Status, item.Status = "incomplete", "incomplete"
	}
	r.Output = []responseMessage{item}
	if u != nil {
		r.Usage = &responseUsage{InputTokens: max(u.PromptTokens, 0), OutputTokens: max(u.CompletionTokens, 0)}
		r.Usage.TotalTokens = r.Usage.InputTokens + r.Usage.OutputTokens
	}
}

// responseOf converts a buffered chat completion to a response object.
// Tool calls are not converted: converted requests carry no tools.
func responseOf(completion []byte, model string, created time.Time) ([]byte, error) {
	a, err := parseCompletion(completion)
	if err != nil {
		return nil, err
	}
	c := a.first()
	text := ""
	if c.Message.Content != nil {
		text = *c.Message.Content
	}
	r := newResponse(model, created)
	item := responseMessage{ID: newID("msg_"), Type: "message", Role: "assistant", Content: []responseText{outputText(text)}}
	r.complete(item, finishOf(c), a.Usage)
	return marshal(r)
}
