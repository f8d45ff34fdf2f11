package gateway

import (
	"switchyard/router/picker"
)

// OpenAIRequest is what routing reads from an OpenAI chat or completions
// body: the same reading the gateway's own ingress does, for other hosts
// of the routing core that see the same bodies (the endpoint picker).
type OpenAIRequest struct {
	// Body is the body to forward: as the client wrote it, less any
	// client-forbidden nvext fields (token_data, worker pins).
	Body   []byte
	Model  string
	Stream bool
	// PromptTokens is the prompt size estimate the picker costs with.
	PromptTokens uint64
	// MaxTokens is the requested output limit, 0 when none is given.
	MaxTokens int
}

// RequestError is a client error found before routing.
type RequestError struct {
	// Status is the HTTP status to answer with; Code the OpenAI error code.
	Status        int
	Code, Message string
	// Refused, when set, is the switchyard_gateway_refused_requests_total
	// reason the problem counts under.
	Refused string
}

func (e *RequestError) Error() string { return e.Message }

// ParseOpenAI reads a chat completions (chat) or completions body with
// the gateway's bounds: a JSON object, no routing member named twice, a
// model, a readable prompt.
func ParseOpenAI(body []byte, chat bool, est picker.Estimator) (OpenAIRequest, *RequestError) {
	k := kindCompletion
	if chat {
		k = kindChat
	}
	in, p := parseInbound(body, k, est)
	if p != nil {
		return OpenAIRequest{}, &RequestError{Status: p.status, Code: p.code, Message: p.message, Refused: p.refused}
	}
	return OpenAIRequest{Body: in.body, Model: in.model, Stream: in.stream, PromptTokens: in.promptTokens, MaxTokens: in.maxTokens}, nil
}

// WithTokenData returns an accepted body with ids as nvext.token_data, so
// the frontend that serves it skips tokenizing again.
func WithTokenData(body []byte, ids []uint32) []byte { return withTokenData(body, ids) }

// IsDynamoHeader reports whether a request header can steer Dynamo's
// routing (any x-dynamo-* name, or an older pin spelling the frontend
// still honours): only the router may send those.
func IsDynamoHeader(name string) bool { return isDynamoHeader(name) }
