package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Paths of the Anthropic Messages ingress: Anthropic's own, and the one
// clients configured with a ".../anthropic" base URL use.
const (
	pathMessages          = "/v1/messages"
	pathAnthropicMessages = "/anthropic/v1/messages"
	anthropicPrefix       = "/anthropic/"
)

// messages is the Anthropic Messages ingress. Requests are converted to
// chat completions and routed like the OpenAI ingress's, pinned when a
// shim pool serves the model (with new pins for every send); answers and
// errors are converted back.
func (g *Gateway) messages() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stripDynamo(r.Header)
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeAnthropicError(w, http.StatusMethodNotAllowed, codeMethodNotAllowed, "use POST for "+r.URL.Path)
			return
		}
		st := g.st.Load()
		anthropicCredential(r.Header)
		key, ok := st.authenticate(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard"`)
			writeAnthropicError(w, http.StatusUnauthorized, codeInvalidAPIKey, "missing or invalid API key: send x-api-key: <key> or Authorization: Bearer <key>")
			return
		}
		body, held, p := g.readBody(w, r, st)
		defer g.bodies.give(held)
		if p != nil {
			writeAnthropicProblem(w, p)
			return
		}
		if !g.parsing(r.Context()) {
			return // the client left
		}
		chat, err := anthropicToChat(body)
		if err != nil {
			g.parsed()
			writeAnthropicProblem(w, problemOf(err))
			return
		}
		// The picker estimates the final body, as the chat path does.
		in, p := parseInbound(chat.body, kindChat, g.est)
		g.parsed()
		if p != nil {
			writeAnthropicProblem(w, p)
			return
		}
		g.serveConverted(w, r, st, key, in, pathMessages, pathChat, &anthropicConverter{chat: chat, body: in.body})
	})
}

// anthropicCredential accepts Anthropic's x-api-key as the gateway key
// (Anthropic SDKs send it instead of a bearer token) and drops every
// Anthropic header, so neither the key nor API versions reach a backend.
func anthropicCredential(h http.Header) {
	if k := h.Get("X-Api-Key"); k != "" && h.Get("Authorization") == "" {
		h.Set("Authorization", "Bearer "+k)
	}
	h.Del("X-Api-Key")
	for name := range h {
		if hasPrefixFold(name, "anthropic-") {
			delete(h, name)
		}
	}
}

// anthropicNotFound answers other /anthropic/ paths in Anthropic's shape.
func anthropicNotFound(w http.ResponseWriter, r *http.Request) {
	writeAnthropicError(w, http.StatusNotFound, codeNotFound, "no such route: "+r.Method+" "+r.URL.Path)
}

// anthropicConverter answers one Messages request.
type anthropicConverter struct {
	chat *anthropicChat
	body []byte // the chat body every send carries
}

func (c *anthropicConverter) outbound(*backend) (string, []byte, *problem) {
	return pathChat, c.body, nil
}

func (c *anthropicConverter) converts(*backend) bool { return true }

func (c *anthropicConverter) writeError(w http.ResponseWriter, status int, code, msg string) {
	writeAnthropicError(w, status, code, msg)
}

func (c *anthropicConverter) buffered(completion []byte) ([]byte, error) {
	return anthropicMessageOf(completion, c.chat)
}

func (c *anthropicConverter) stream() streamSink { return newAnthropicStream(c.chat) }

// anthropicError is Anthropic's error body.
type anthropicError struct {
	Type  string               `json:"type"` // "error"
	Error anthropicErrorDetail `json:"error"`
}

type anthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicErrorOf shapes an error. Anthropic's error has no code
// field, so the gateway's code ends the message, where clients and
// operators can still match it.
func anthropicErrorOf(status int, code, msg string) anthropicError {
	if code != "" {
		msg = strings.TrimRight(msg, ". ") + ": " + code
	}
	return anthropicError{Type: "error", Error: anthropicErrorDetail{Type: anthropicErrorType(status), Message: msg}}
}

func anthropicErrorJSON(status int, code, msg string) []byte {
	b, _ := json.Marshal(anthropicErrorOf(status, code, msg))
	return b
}

func writeAnthropicProblem(w http.ResponseWriter, p *problem) {
	p.noteOn(w)
	writeAnthropicError(w, p.status, p.code, p.message)
}

func writeAnthropicError(w http.ResponseWriter, status int, code, msg string) {
	noteOf(w).answered(code, msg)
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(anthropicErrorJSON(status, code, msg), '\n'))
}

// anthropicErrorType is Anthropic's error.type for a status, which its
// SDKs map to exception classes.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}
