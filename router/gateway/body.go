package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"switchyard/router/jsonvalid"
	"switchyard/router/metrics"
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
	// refused, when set, counts the problem under
	// switchyard_gateway_refused_requests_total with this reason.
	refused string
}

func (p *problem) write(w http.ResponseWriter) {
	p.noteOn(w)
	writeError(w, p.status, p.code, p.message)
}

// noteOn marks the request w answers as refused for p's reason, counted
// when the request ends.
func (p *problem) noteOn(w http.ResponseWriter) {
	if n := noteOf(w); n != nil && p.refused != "" {
		n.refused = p.refused
	}
}

// readBody reads the whole request body under the size limit and the
// gateway's body budget; the caller gives the bytes held back to the
// budget once the request's answer has ended (the body is held until
// then). The server's ReadTimeout bounds how long a slow client may
// take.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, st *state) (body []byte, held int64, p *problem) {
	limit := maxBodyFor(st)
	if r.ContentLength > limit {
		return nil, 0, tooLarge() // refuse before reading a byte
	}
	br := budgetReader{budget: &g.bodies, limit: budgetLimit(st.cfg.Gateway)}
	data, p := readAll(w, r, limit, &br)
	if p != nil {
		g.bodies.give(br.taken)
		return nil, 0, p
	}
	return data, br.taken, nil
}

func tooLarge() *problem {
	return &problem{status: http.StatusRequestEntityTooLarge, code: codeTooLarge, message: "request body is larger than the gateway's limit (gateway.max_body_bytes)"}
}

// readAll reads r's body through br under limit.
func readAll(w http.ResponseWriter, r *http.Request, limit int64, br *budgetReader) ([]byte, *problem) {
	// MaxBytesReader needs the server's own writer to mark the connection
	// for closing once the limit is hit; wrappers hide that.
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	br.r = http.MaxBytesReader(w, r.Body, limit)
	data, err := readDeclared(br, r.ContentLength)
	if err == nil {
		return data, nil
	}
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.Is(err, errBodyBudget):
		w.Header().Set("Retry-After", retryAfterSeconds)
		return nil, &problem{status: http.StatusServiceUnavailable, code: codeOverloaded, refused: metrics.RefusedOverloaded,
			message: "the gateway holds as many request bytes as it takes (gateway.max_buffered_body_bytes); retry shortly"}
	case errors.As(err, &mbe):
		return nil, tooLarge()
	case errors.As(err, &ne) && ne.Timeout():
		return nil, &problem{status: http.StatusRequestTimeout, code: codeReadTimeout, message: "the request body was not received in time"}
	}
	return nil, &problem{status: http.StatusBadRequest, code: codeInvalidRequest, message: "could not read the request body"}
}

// maxPresized bounds the buffer sized from a declared Content-Length
// before its bytes arrive: a client may declare more than it sends, and
// only bytes received count against the body budget.
const maxPresized = 32 << 10

// readDeclared reads r to its end into a buffer sized once from the
// declared length (up to maxPresized), growing past it only as bytes
// arrive, as io.ReadAll does.
func readDeclared(r io.Reader, declared int64) ([]byte, error) {
	if declared <= 0 {
		return io.ReadAll(r)
	}
	// One byte more than declared, so the read that finds the end needs
	// no larger buffer.
	b := make([]byte, 0, min(declared, maxPresized)+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow as append does
		}
	}
}

// Kinds of inference request.
type kind int

const (
	kindChat kind = iota
	kindCompletion
)

// Bounds on what routing reads from an OpenAI request. Bodies are capped
// by gateway.max_body_bytes; these cap the work a body can ask of the
// prompt estimate, whatever its size, and match the converters' bounds.
const (
	// maxPromptItems caps the strings (or token-id batches) of a
	// completions prompt.
	maxPromptItems = maxMessages
	// maxPromptTokenIDs caps the token ids of a pre-tokenized prompt.
	maxPromptTokenIDs = 1 << 20
	// maxNvextMembers caps the members of nvext, which has a few dozen
	// fields at most.
	maxNvextMembers = 256
)

// routingKeys are the top-level members routing reads. A body naming one
// twice is refused: the gateway and the upstream might each read a
// different one (encoding/json keeps the last, other decoders the first).
var routingKeys = [...]string{"model", "stream", "messages", "prompt", "nvext", "max_tokens",
	"max_completion_tokens", "input", "instructions"}

// Indexes into routingKeys, for the members parseInbound reads.
const (
	rkModel = iota
	rkStream
	rkMessages
	rkPrompt
	rkNvext
	rkMaxTokens
	rkMaxCompletionTokens
)

// inboundScan is what one pass over a body finds: the spans of the
// routing members and where nvext sits among the members.
type inboundScan struct {
	spans [len(routingKeys)][2]int
	seen  [len(routingKeys)]bool
	// nvext's member, for removing it: its key's start, the end of the
	// member before it (-1 when first) and the start of the key after it
	// (-1 when last).
	nvKey, nvPrevEnd, nvNextKey int
}

func (sc *inboundScan) raw(body []byte, k int) []byte {
	if !sc.seen[k] {
		return nil
	}
	return body[sc.spans[k][0]:sc.spans[k][1]]
}

// parseInbound reads what routing needs in one pass over the body, and
// removes client-forbidden nvext fields. Field names match exactly, as
// the upstream servers match them (encoding/json's struct decoding would
// also accept "Model" or "NVEXT"), escaped spellings included.
func parseInbound(body []byte, k kind, est picker.Estimator) (*inbound, *problem) {
	sc, p := scanInbound(body)
	if p != nil {
		return nil, p
	}
	in := &inbound{body: body}
	if raw := sc.raw(body, rkModel); raw == nil || !decodeString(raw, &in.model) || strings.TrimSpace(in.model) == "" {
		return nil, badRequest("model is required and must be a non-empty string")
	}
	switch string(sc.raw(body, rkStream)) {
	case "", "null", "false":
	case "true":
		in.stream = true
	default:
		return nil, badRequest("stream must be true or false")
	}
	var pt promptText
	if k == kindChat {
		p = pt.messages(sc.raw(body, rkMessages))
	} else {
		p = pt.prompt(sc.raw(body, rkPrompt))
	}
	if p != nil {
		return nil, p
	}
	in.promptTokens = est.Estimate(pt.text.String()) + pt.tokens
	in.maxTokens = maxTokensOf(sc.raw(body, rkMaxCompletionTokens), sc.raw(body, rkMaxTokens))
	stripped, p := stripNvext(body, sc)
	if p != nil {
		return nil, p
	}
	if stripped != nil {
		in.body = stripped
	}
	return in, nil
}

func badRequest(msg string) *problem {
	return &problem{status: http.StatusBadRequest, code: codeInvalidRequest, message: msg}
}

// pastBound is a 400 for a body past one of the bounds, counted.
func pastBound(msg string) *problem {
	p := badRequest(msg)
	p.refused = metrics.RefusedBounds
	return p
}

// duplicateKey is a 400 for a member named twice, counted.
func duplicateKey(where, name string) *problem {
	p := badRequest(where + " names " + strconv.Quote(name) + " more than once")
	p.refused = metrics.RefusedDuplicateKey
	return p
}

// scanInbound checks the body is a JSON object and finds its routing
// members, refusing one named twice.
func scanInbound(body []byte) (*inboundScan, *problem) {
	if !jsonvalid.Valid(body) {
		return nil, badRequest("the request body must be a JSON object")
	}
	sc := &inboundScan{nvKey: -1, nvPrevEnd: -1, nvNextKey: -1}
	w := &jsonWalker{b: body}
	if w.peek() != '{' {
		return nil, badRequest("the request body must be a JSON object")
	}
	var dup *problem
	prevEnd := -1
	w.members(func(key []byte, keyStart int) bool {
		if sc.nvKey >= 0 && sc.nvNextKey < 0 && keyStart > sc.nvKey {
			sc.nvNextKey = keyStart
		}
		start, end := w.value()
		for i, name := range routingKeys {
			if !keyIs(key, name) {
				continue
			}
			if sc.seen[i] {
				dup = duplicateKey("the request body", name)
				return false
			}
			sc.seen[i], sc.spans[i] = true, [2]int{start, end}
			if i == rkNvext {
				sc.nvKey, sc.nvPrevEnd = keyStart, prevEnd
			}
			break
		}
		prevEnd = end
		return true
	})
	if dup != nil {
		return nil, dup
	}
	return sc, nil
}

// maxTokensOf reads the output limit: max_completion_tokens (OpenAI's
// newer name, which wins) or max_tokens; 0 when neither is a positive
// integer (the upstream judges it).
func maxTokensOf(raws ...[]byte) int {
	for _, raw := range raws {
		if n, ok := decodeInt(raw); ok && n > 0 {
			return n
		}
	}
	return 0
}

// decodeString decodes a JSON value (of a body jsonvalid.Valid accepted) into
// s as json.Unmarshal does, false when it is not a string. A string
// without escapes in valid UTF-8 is its bytes; others are decoded.
func decodeString(raw []byte, s *string) bool {
	if len(raw) < 2 || raw[0] != '"' {
		return json.Unmarshal(raw, s) == nil // null leaves s as it was
	}
	if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		*s = string(inner)
		return true
	}
	return json.Unmarshal(raw, s) == nil
}

// decodeInt decodes a JSON value (of a body jsonvalid.Valid accepted) as
// json.Unmarshal does into an int; false when it is not one.
func decodeInt(raw []byte) (int, bool) {
	if raw == nil {
		return 0, false
	}
	if n, err := strconv.Atoi(string(raw)); err == nil {
		return n, true // digits, with an optional minus: the JSON integers
	}
	var n int
	err := json.Unmarshal(raw, &n)
	return n, err == nil
}

// promptText gathers the text the prompt estimate reads, and the token
// ids of pre-tokenized prompts (which count as themselves).
type promptText struct {
	text   strings.Builder
	tokens uint64
	parts  int // content parts read, against maxBlocks
}

// messages reads the text of every message: string contents, and the
// text parts of array contents. Anything else is the upstream's to
// validate; the estimate only needs the words.
func (pt *promptText) messages(raw []byte) *problem {
	if raw == nil {
		return nil
	}
	w := &jsonWalker{b: raw}
	n := 0
	var p *problem
	w.elements(func() bool {
		if n++; n > maxMessages {
			p = pastBound(fmt.Sprintf("messages: more than %d messages", maxMessages))
			return false
		}
		if w.peek() != '{' {
			w.value()
			return true
		}
		return w.members(func(key []byte, _ int) bool {
			if !keyIs(key, "content") {
				w.value()
				return true
			}
			p = pt.content(w)
			return p == nil
		})
	})
	return p
}

// content reads one message content: a string, or an array of parts
// whose "text" members are read.
func (pt *promptText) content(w *jsonWalker) *problem {
	switch w.peek() {
	case '"':
		pt.appendString(w)
		return nil
	case '[':
	default:
		w.value()
		return nil
	}
	var p *problem
	w.elements(func() bool {
		if pt.parts++; pt.parts > maxBlocks {
			p = pastBound(fmt.Sprintf("messages: more than %d content parts in all", maxBlocks))
			return false
		}
		if w.peek() != '{' {
			w.value()
			return true
		}
		return w.members(func(key []byte, _ int) bool {
			if keyIs(key, "text") && w.peek() == '"' {
				pt.appendString(w)
			} else {
				w.value()
			}
			return true
		})
	})
	return p
}

// prompt reads a completions prompt: a string, a list of strings, token
// ids, or batches of token ids.
func (pt *promptText) prompt(raw []byte) *problem {
	w := &jsonWalker{b: raw}
	switch w.peek() {
	case '"':
		pt.appendString(w)
		return nil
	case '[':
	default:
		return nil
	}
	items := 0
	var p *problem
	w.elements(func() bool {
		switch w.peek() {
		case '"', '[':
			if items++; items > maxPromptItems {
				p = pastBound(fmt.Sprintf("prompt: more than %d prompts", maxPromptItems))
				return false
			}
		}
		switch w.peek() {
		case '"':
			pt.appendString(w)
		case '[':
			w.elements(func() bool {
				p = pt.tokenID(w)
				return p == nil
			})
		default:
			p = pt.tokenID(w)
		}
		return p == nil
	})
	return p
}

// tokenID counts one token id (any number: the upstream validates it).
func (pt *promptText) tokenID(w *jsonWalker) *problem {
	start, end := w.value()
	if c := w.b[start:end]; len(c) > 0 && (c[0] == '-' || c[0] >= '0' && c[0] <= '9') {
		if pt.tokens++; pt.tokens > maxPromptTokenIDs {
			return pastBound(fmt.Sprintf("prompt: more than %d token ids", maxPromptTokenIDs))
		}
	}
	return nil
}

// appendString adds the string at the cursor, and a newline, to the text.
// Strings without escapes are copied as they are; others are decoded.
func (pt *promptText) appendString(w *jsonWalker) {
	start, end := w.value()
	raw := w.b[start:end]
	if len(raw) < 2 {
		return
	}
	if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 {
		pt.text.Write(inner)
	} else {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			pt.text.WriteString(s)
		}
	}
	pt.text.WriteByte('\n')
}

// clientForbiddenNvext are nvext fields only the router may set:
// token_data (a pre-tokenized prompt the frontend would trust over the
// text) and every worker pin, so a client can never pin workers through the
// body either, whichever headers the router sends.
var clientForbiddenNvext = []string{"token_data", "backend_instance_id", "prefill_worker_id",
	"decode_worker_id", "dp_rank", "prefill_dp_rank"}

// stripNvext removes the client-forbidden nvext fields, and refuses an
// nvext naming a field twice. Other members stay byte for byte: the body
// is spliced, not re-encoded, and only when something was removed (nil
// otherwise). An nvext left empty goes entirely.
func stripNvext(body []byte, sc *inboundScan) ([]byte, *problem) {
	raw := sc.raw(body, rkNvext)
	if raw == nil {
		return nil, nil
	}
	w := &jsonWalker{b: raw}
	if w.peek() != '{' {
		return nil, nil // not an object: the upstream refuses it
	}
	var keys []string
	var kept [][]byte
	removed := false
	var p *problem
	w.members(func(key []byte, keyStart int) bool {
		_, end := w.value()
		name, ok := decodeKey(key)
		switch {
		case len(keys) >= maxNvextMembers:
			p = pastBound(fmt.Sprintf("nvext: more than %d members", maxNvextMembers))
		case !ok:
			p = badRequest("nvext: a member name could not be read")
		case slices.Contains(keys, name):
			p = duplicateKey("nvext", name)
		}
		if p != nil {
			return false
		}
		keys = append(keys, name)
		if slices.Contains(clientForbiddenNvext, name) {
			removed = true
		} else {
			kept = append(kept, raw[keyStart:end])
		}
		return true
	})
	if p != nil || !removed {
		return nil, p
	}
	start, end := sc.spans[rkNvext][0], sc.spans[rkNvext][1]
	var repl []byte
	if len(kept) > 0 {
		repl = append(append([]byte{'{'}, bytes.Join(kept, []byte{','})...), '}')
	} else {
		// The whole member goes, with the comma that joined it.
		switch {
		case sc.nvPrevEnd >= 0:
			start = sc.nvPrevEnd
		case sc.nvNextKey >= 0:
			start, end = sc.nvKey, sc.nvNextKey
		default:
			start = sc.nvKey
		}
	}
	out := make([]byte, 0, len(body)-(end-start)+len(repl))
	out = append(append(append(out, body[:start]...), repl...), body[end:]...)
	return out, nil
}

// decodeKey decodes a raw JSON key (quotes included).
func decodeKey(raw []byte) (string, bool) {
	if len(raw) < 2 {
		return "", false
	}
	if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 {
		return string(inner), true
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err == nil
}
