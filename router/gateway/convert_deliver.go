package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"switchyard/router/metrics"
)

// maxConvertedAnswer bounds a buffered chat completion held for
// conversion (the relay path streams bodies through instead), and the
// text a converted stream accumulates for its closing events.
const maxConvertedAnswer = 32 << 20

// Codes of converted answers that went wrong on the backend's side.
const (
	codeUpstreamError   = "upstream_error"
	codeUpstreamInvalid = "upstream_invalid_answer"
)

// deliverConverted answers with the converted form of an upstream chat
// answer: an error in the client's shape for a non-2xx, a converted event
// stream, or a converted JSON body. Upstream headers are not relayed:
// they describe the chat answer, not the converted one.
func (x *exchange) deliverConverted(a *attempt, peek []byte) string {
	status := a.resp.StatusCode
	if status/100 != 2 {
		if peek == nil {
			peek = peekBody(a)
		}
		result := statusResult(status)
		x.settle(a, result, verdictFor(status))
		code, msg := upstreamError(peek, status)
		x.fail(status, code, msg)
		return result
	}
	if x.in.stream && isEventStream(a.resp.Header) {
		x.openStream()
		result, v := x.pumpStream(a, a.resp.Body, x.conv.stream())
		x.settle(a, result, v)
		return result
	}
	data, err := io.ReadAll(io.LimitReader(a.resp.Body, maxConvertedAnswer+1))
	if err != nil {
		result, v := x.brokenResult(a, err)
		x.settle(a, result, v)
		x.failBrokenRead(result)
		return result
	}
	if len(data) > maxConvertedAnswer {
		x.settle(a, metrics.ResultServerError, neutral)
		x.fail(http.StatusBadGateway, codeUpstreamInvalid, "the backend's answer is larger than the gateway converts")
		return metrics.ResultServerError
	}
	if x.in.stream {
		// A stream was asked for and JSON came: the client still gets
		// the event stream its API promises.
		return x.streamCompletion(a, data)
	}
	out, err := x.conv.buffered(data)
	if err != nil {
		x.settle(a, metrics.ResultServerError, failure)
		x.fail(http.StatusBadGateway, codeUpstreamInvalid, "the backend's answer could not be converted: "+err.Error())
		return metrics.ResultServerError
	}
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(out)))
	x.w.WriteHeader(http.StatusOK)
	result, v := metrics.ResultOK, success
	if x.copyBody(bytes.NewReader(out)) != nil {
		result, v = metrics.ResultCanceled, neutral
	}
	x.settle(a, result, v)
	return result
}

// openStream writes the head of a converted event stream.
func (x *exchange) openStream() {
	h := x.w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	x.w.WriteHeader(http.StatusOK)
}

// streamCompletion turns a buffered chat completion into the converted
// event stream, through the same sink a streamed answer takes.
func (x *exchange) streamCompletion(a *attempt, data []byte) string {
	events, err := completionEvents(data)
	if err != nil {
		x.settle(a, metrics.ResultServerError, failure)
		x.fail(http.StatusBadGateway, codeUpstreamInvalid, "the backend's answer could not be converted: "+err.Error())
		return metrics.ResultServerError
	}
	x.openStream()
	send, sink := x.streamSender(), x.conv.stream()
	result, v := metrics.ResultOK, success
	for _, ev := range events {
		if err = sink.event(send, ev, false); err != nil {
			break
		}
	}
	if err == nil {
		err = sink.end(send)
	}
	if err != nil {
		result, v = sinkResult(err)
	}
	x.settle(a, result, v)
	return result
}

// failBrokenRead answers a buffered answer that broke off while it was
// read (nothing has been written yet).
func (x *exchange) failBrokenRead(result string) {
	switch {
	case x.r.Context().Err() != nil:
	case result == metrics.ResultCanceled:
		x.writeCanceled()
	case result == metrics.ResultTimeout:
		x.fail(http.StatusGatewayTimeout, codeUpstreamTimeout, "the backend did not answer in time")
	default:
		x.fail(http.StatusBadGateway, codeUpstreamDown, "the backend's answer broke off")
	}
}

// maxUpstreamMessage bounds an upstream error message repeated to the
// client.
const maxUpstreamMessage = 1024

// upstreamError reads the code and message of an upstream error body in
// the shapes OpenAI-compatible servers use: OpenAI's {"error":{...}},
// {"error":"..."}, vLLM's {"message":...,"code":400} and FastAPI's
// {"detail":"..."}; otherwise the status and any short text body.
func upstreamError(body []byte, status int) (code, msg string) {
	code = codeUpstreamError
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &e) == nil {
		var inner struct {
			Message string          `json:"message"`
			Code    json.RawMessage `json:"code"`
		}
		var s string
		switch {
		case json.Unmarshal(e.Error, &inner) == nil && inner.Message != "":
			msg = inner.Message
			if json.Unmarshal(inner.Code, &s) == nil && isToken(s) {
				code = s
			}
		case json.Unmarshal(e.Error, &s) == nil && s != "":
			msg = s
		case e.Message != "":
			msg = e.Message
		case json.Unmarshal(e.Detail, &s) == nil && s != "":
			msg = s
		}
	} else if t := strings.TrimSpace(string(body)); t != "" && utf8.ValidString(t) && !strings.ContainsAny(t, "<") {
		msg = t
	}
	if msg == "" {
		msg = "the backend answered HTTP " + strconv.Itoa(status) + " " + http.StatusText(status)
	}
	return code, truncateUTF8(msg, maxUpstreamMessage)
}

// isToken reports whether an upstream code is a plain identifier, so a
// code repeated to the client is one.
func isToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c == '-' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
