package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"

	"switchyard/router/picker"
)

// inbound is a parsed client request. Only what routing needs is decoded;
// the body is forwarded as the client wrote it unless something had to be
// removed from it.
type inbound struct {
	body   []byte
	model  string
	stream bool
	// promptTokens is the prompt size estimate the picker costs with.
	promptTokens uint64
	// maxTokens is the requested output limit, 0 when none is given (or
	// it is not a positive integer: the upstream judges it).
	maxTokens int
}

// problem is a client error found before routing.
type problem struct {
	status  int
	code    string
	message string
}

func (p *problem) write(w http.ResponseWriter) { writeError(w, p.status, p.code, p.message) }

// readBody reads the whole request body under the size limit. The
// server's ReadTimeout bounds how long a slow client may take.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *problem) {
	tooLarge := &problem{http.StatusRequestEntityTooLarge, codeTooLarge, "request body is larger than the gateway's limit (gateway.max_body_bytes)"}
	if r.ContentLength > limit {
		return nil, tooLarge // refuse before reading a byte
	}
	// MaxBytesReader needs the server's own writer to mark the connection
	// for closing once the limit is hit; wrappers hide that.
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil {
		return data, nil
	}
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge
	case errors.As(err, &ne) && ne.Timeout():
		return nil, &problem{http.StatusRequestTimeout, codeReadTimeout, "the request body was not received in time"}
	}
	return nil, &problem{http.StatusBadRequest, codeInvalidRequest, "could not read the request body"}
}

// Kinds of inference request.
type kind int

const (
	kindChat kind = iota
	kindCompletion
)

// parseInbound decodes what routing needs and removes nvext.token_data.
// Field names are matched exactly, as the upstream servers match them
// (encoding/json's struct decoding would also accept "Model" or "NVEXT").
func parseInbound(body []byte, k kind, est picker.Estimator) (*inbound, *problem) {
	bad := func(msg string) *problem { return &problem{http.StatusBadRequest, codeInvalidRequest, msg} }
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return nil, bad("the request body must be a JSON object")
	}
	in := &inbound{body: body}
	raw, ok := top["model"]
	if !ok || json.Unmarshal(raw, &in.model) != nil || strings.TrimSpace(in.model) == "" {
		return nil, bad("model is required and must be a non-empty string")
	}
	if raw, ok := top["stream"]; ok && string(raw) != "null" {
		if json.Unmarshal(raw, &in.stream) != nil {
			return nil, bad("stream must be true or false")
		}
	}
	var text string
	var tokens uint64
	if k == kindChat {
		text = chatText(top["messages"])
	} else {
		text, tokens = promptText(top["prompt"])
	}
	in.promptTokens = est.Estimate(text) + tokens
	in.maxTokens = maxTokensOf(top)
	stripped, changed, err := stripTokenData(top)
	if err != nil {
		return nil, bad("the request body could not be re-encoded")
	}
	if changed {
		in.body = stripped
	}
	return in, nil
}

// maxTokensOf reads the output limit: max_completion_tokens (OpenAI's
// newer name, which wins) or max_tokens.
func maxTokensOf(top map[string]json.RawMessage) int {
	for _, f := range [...]string{"max_completion_tokens", "max_tokens"} {
		var n int
		if raw, ok := top[f]; ok && json.Unmarshal(raw, &n) == nil && n > 0 {
			return n
		}
	}
	return 0
}

// chatText concatenates the text of every message: string contents, and
// the text parts of array contents. Anything else is the upstream's to
// validate; the estimate only needs the words.
func chatText(raw json.RawMessage) string {
	var msgs []struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &msgs) != nil {
		return ""
	}
	var b strings.Builder
	for _, m := range msgs {
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			b.WriteString(s)
			b.WriteByte('\n')
			continue
		}
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Content, &parts) == nil {
			for _, p := range parts {
				b.WriteString(p.Text)
				b.WriteByte('\n')
			}
		}
	}
	return b.String()
}

// promptText reads a completions prompt: a string, a list of strings, or
// pre-tokenized prompts (token ids count as themselves).
func promptText(raw json.RawMessage) (string, uint64) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, 0
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return strings.Join(list, "\n"), 0
	}
	var ids []uint64
	if json.Unmarshal(raw, &ids) == nil {
		return "", uint64(len(ids))
	}
	var batches [][]uint64
	if json.Unmarshal(raw, &batches) == nil {
		var n uint64
		for _, b := range batches {
			n += uint64(len(b))
		}
		return "", n
	}
	return "", 0
}

// clientForbiddenNvext are nvext fields only the router may set:
// token_data (a pre-tokenized prompt the frontend would trust over the
// text) and every worker pin, so a client can never pin workers through the
// body either, whichever headers the router sends.
var clientForbiddenNvext = []string{"token_data", "backend_instance_id", "prefill_worker_id",
	"decode_worker_id", "dp_rank", "prefill_dp_rank"}

// stripTokenData removes the client-forbidden nvext fields. Other nvext
// fields stay. The body is re-encoded only when something was removed, and
// then without HTML escaping so strings keep their bytes.
func stripTokenData(top map[string]json.RawMessage) ([]byte, bool, error) {
	raw, ok := top["nvext"]
	if !ok {
		return nil, false, nil
	}
	var nv map[string]json.RawMessage
	if json.Unmarshal(raw, &nv) != nil || nv == nil {
		return nil, false, nil // not an object: the upstream refuses it
	}
	removed := false
	for _, f := range clientForbiddenNvext {
		if _, ok := nv[f]; ok {
			delete(nv, f)
			removed = true
		}
	}
	if !removed {
		return nil, false, nil
	}
	if len(nv) == 0 {
		delete(top, "nvext")
	} else {
		b, err := marshal(nv)
		if err != nil {
			return nil, false, err
		}
		top["nvext"] = b
	}
	b, err := marshal(top)
	return b, err == nil, err
}

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
