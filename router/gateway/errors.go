package gateway

import (
	"encoding/json"
	"net/http"
)

// Error codes the gateway answers with itself (the error.code field).
// Upstream errors are relayed with their own bodies.
const (
	codeInvalidRequest   = "invalid_request"
	codeInvalidAPIKey    = "invalid_api_key"
	codeModelNotFound    = "model_not_found"
	codeNotFound         = "not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeTooLarge         = "request_too_large"
	codeReadTimeout      = "request_read_timeout"
	codeNoBackend        = "no_available_backend"
	codeUpstreamDown     = "upstream_unavailable"
	codeUpstreamTimeout  = "upstream_timeout"
	codeRequestTimeout   = "request_timeout"
	codeStreamBroken     = "stream_interrupted"
	// The disaggregated (shim) failure codes keep the seed's names.
	codePrefillDecodeUnavailable = "disaggregated_prefill_decode_unavailable"
	codeDecodeFailed             = "disaggregated_decode_failed"
)

// errorBody is the OpenAI error shape every Switchyard API shares.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
}

// errorType is OpenAI's error.type vocabulary for a status, which some
// clients branch on.
func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func errorJSON(status int, code, msg string) []byte {
	b, _ := json.Marshal(errorBody{errorDetail{Message: msg, Type: errorType(status), Code: code}})
	return b
}

// writeError answers with an OpenAI error. Headers already set on w
// (disclosure headers) are kept; an upstream Content-Length is not.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	noteOf(w).answered(code, msg)
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(errorJSON(status, code, msg), '\n'))
}
