package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Bounds on a converted request. Bodies are already capped by
// gateway.max_body_bytes; these cap the work and memory a hostile body
// can ask of a converter, whatever its size.
const (
	maxMessages  = 4096 // messages (or Responses input items)
	maxBlocks    = 4096 // content blocks of the whole request, nested ones included
	maxListItems = 1024 // tools, stop sequences
)

// requestError is a converted request the client got wrong: a field of
// the wrong shape, or past a bound. Its message names the field by path.
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func mustBe(path, want string) error { return &requestError{path + " must be " + want} }

func unsupported(path, what string) error {
	return &requestError{path + ": " + what + " cannot be converted to a chat completion"}
}

// problemOf is the 400 a conversion error is answered with.
func problemOf(err error) *problem {
	if errors.As(err, new(errTooMany)) {
		return pastBound(err.Error())
	}
	return badRequest(err.Error())
}

// jsonObject is a JSON object's members, matched by exact name as the
// upstream servers match them (encoding/json's struct decoding would
// also take "Model" for "model").
type jsonObject map[string]json.RawMessage

// fields decodes the named members of an object and skips the rest
// without keeping them, so an object with a million keys costs no more
// than its bytes. raw must be valid JSON (the body was checked whole).
func fields(raw json.RawMessage, path string, names ...string) (jsonObject, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, mustBe(path, "an object")
	}
	o := jsonObject{}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return nil, mustBe(path, "an object")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, mustBe(path, "an object")
		}
		if slices.Contains(names, key) {
			o[key] = v
		}
	}
	return o, nil
}

// elements decodes an array one element at a time, refusing it once it
// holds more than limit: a huge array is never held whole.
func elements(raw json.RawMessage, path string, limit int, what string) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, mustBe(path, "an array")
	}
	var out []json.RawMessage
	for dec.More() {
		if len(out) >= limit {
			return nil, errTooMany{&requestError{fmt.Sprintf("%s: more than %d %s", path, limit, what)}}
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, mustBe(path, "an array")
		}
		out = append(out, v)
	}
	return out, nil
}

// errTooMany is an array past its bound.
type errTooMany struct{ *requestError }

// blockBudget is what is left of maxBlocks as a request is converted.
type blockBudget int

// take charges n blocks.
func (b *blockBudget) take(path string, n int) error {
	if n > int(*b) {
		return errTooMany{&requestError{fmt.Sprintf("%s: the request has more than %d content blocks", path, maxBlocks)}}
	}
	*b -= blockBudget(n)
	return nil
}

// blocks decodes an array of content blocks, charged to the budget.
func (b *blockBudget) blocks(raw json.RawMessage, path string) ([]json.RawMessage, error) {
	els, err := elements(raw, path, int(*b), "content blocks")
	if errors.As(err, new(errTooMany)) {
		return nil, b.take(path, int(*b)+1)
	}
	if err != nil {
		return nil, err
	}
	return els, b.take(path, len(els))
}

// absent reports a member that is missing or null.
func (o jsonObject) absent(key string) bool {
	v, ok := o[key]
	return !ok || string(bytes.TrimSpace(v)) == "null"
}

// str is a string member; "" when absent.
func (o jsonObject) str(key, path string) (string, error) {
	if o.absent(key) {
		return "", nil
	}
	var s string
	if json.Unmarshal(o[key], &s) != nil {
		return "", mustBe(path, "a string")
	}
	return s, nil
}

// required is a string member that must be there and not blank.
func (o jsonObject) required(key, path string) (string, error) {
	s, err := o.str(key, path)
	if err == nil && strings.TrimSpace(s) == "" {
		err = mustBe(path, "a non-empty string")
	}
	return s, err
}

// number is a numeric member; nil when absent.
func (o jsonObject) number(key, path string) (*float64, error) {
	if o.absent(key) {
		return nil, nil
	}
	var f float64
	if json.Unmarshal(o[key], &f) != nil {
		return nil, mustBe(path, "a number")
	}
	return &f, nil
}

// count is a positive integer member; nil when absent.
func (o jsonObject) count(key, path string) (*int64, error) {
	if o.absent(key) {
		return nil, nil
	}
	var n int64
	if json.Unmarshal(o[key], &n) != nil || n < 1 {
		return nil, mustBe(path, "a positive integer")
	}
	return &n, nil
}

// boolean is a boolean member; false when absent.
func (o jsonObject) boolean(key, path string) (bool, error) {
	if o.absent(key) {
		return false, nil
	}
	var b bool
	if json.Unmarshal(o[key], &b) != nil {
		return false, mustBe(path, "true or false")
	}
	return b, nil
}

// isJSONString reports whether raw is a JSON string (rather than an
// array or object), for the members that may be either.
func isJSONString(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '"'
}

// isJSONObject reports whether raw is a JSON object.
func isJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// stringList decodes an array of strings (stop sequences).
func stringList(raw json.RawMessage, path string) ([]string, error) {
	els, err := elements(raw, path, maxListItems, "items")
	if err != nil {
		return nil, err
	}
	out := make([]string, len(els))
	for i, el := range els {
		if json.Unmarshal(el, &out[i]) != nil {
			return nil, mustBe(fmt.Sprintf("%s[%d]", path, i), "a string")
		}
	}
	return out, nil
}

// at is the path of an array element.
func at(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// imageURLAllowed reports whether an image URL may be forwarded: web
// URLs and inline data only, never a scheme that would make the backend
// read its own files.
func imageURLAllowed(u string) bool {
	l := strings.ToLower(u)
	return strings.HasPrefix(l, "https://") || strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "data:image/")
}

// marshal encodes without HTML escaping, so strings keep their bytes.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
