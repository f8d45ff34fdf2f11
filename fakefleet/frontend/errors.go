package frontend

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// prefillIDRequired is the direct-mode frontend's refusal of a request to a
// disaggregated model without a prefill pin, verbatim (dynamo-wire §8.1):
// the router recognises it by this text.
const prefillIDRequired = "Prefill worker ID required in Direct routing mode but none found in request. " +
	"Expected prefill_worker_id to be set via x-dynamo-prefill-instance-id header by external router (e.g., EPP)."

// apiError is an answer other than success.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func errBadRequest(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "invalid_request", fmt.Sprintf(format, args...)}
}

func errInternal(msg string) *apiError {
	return &apiError{http.StatusInternalServerError, "internal_error", msg}
}

// errGenerate is the frontend's wrapping of a failure past routing.
func errGenerate(format string, args ...any) *apiError {
	return errInternal("Failed to generate completions: " + fmt.Sprintf(format, args...))
}

// errNotFound is what the direct router answers for an instance id that is
// not among the model's workers of the needed role.
func errNotFound(id uint64) *apiError { return errGenerate("instance_id=%d not found", id) }

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
}

func errorJSON(e *apiError) []byte {
	typ := "invalid_request_error"
	if e.status >= 500 {
		typ = "server_error"
	}
	b, _ := json.Marshal(errorBody{errorDetail{Message: e.msg, Type: typ, Code: e.code}})
	return b
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_, _ = w.Write(errorJSON(e))
}
