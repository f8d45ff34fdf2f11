package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"

	"switchyard/router/jsonvalid"
)

// Input is one request's data, as JSON so that objects keep the order the client wrote them in:
// transformers renders Python dicts in insertion order, and tojson of a tool schema or of tool-call
// arguments must print the keys as the client sent them.
type Input struct {
	// Messages is the JSON array of chat messages, as the request carries them.
	Messages json.RawMessage
	// Tools is the JSON array of tool definitions; empty or null passes none, as transformers does
	// when a request has no tools.
	Tools json.RawMessage
	// Documents is the JSON array of documents for retrieval templates; empty or null passes none.
	Documents json.RawMessage
	// AddGenerationPrompt asks the template to open the assistant's turn.
	AddGenerationPrompt bool
	// Kwargs is a JSON object of extra template variables (chat_template_kwargs, such as Qwen3's
	// enable_thinking); they override the special tokens, as in transformers.
	Kwargs json.RawMessage
}

// reservedNames are the variables Input sets itself; transformers refuses them as kwargs too.
var reservedNames = map[string]bool{"messages": true, "tools": true, "documents": true, "add_generation_prompt": true}

func (in Input) checkSize(limit int) error {
	n := len(in.Messages) + len(in.Tools) + len(in.Documents) + len(in.Kwargs)
	if n > limit {
		return fmt.Errorf("%w: request data is %d bytes, over the limit of %d", ErrTooLarge, n, limit)
	}
	return nil
}

func (in Input) addRequest(vars map[string]jinja.Value, conv *converter) error {
	if len(bytes.TrimSpace(in.Messages)) == 0 {
		return fmt.Errorf("%w: messages are missing", ErrInput)
	}
	messages, err := conv.convert(in.Messages, "messages")
	if err != nil {
		return err
	}
	if !messages.IsList() {
		return fmt.Errorf("%w: messages must be a JSON array", ErrInput)
	}
	vars["messages"] = messages
	for _, field := range []struct {
		name string
		raw  json.RawMessage
	}{{"tools", in.Tools}, {"documents", in.Documents}} {
		v, err := conv.optional(field.raw, field.name)
		if err != nil {
			return err
		}
		vars[field.name] = v
	}
	vars["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	return nil
}

func addKwargs(vars map[string]jinja.Value, raw json.RawMessage, conv *converter) error {
	kwargs, err := conv.optional(raw, "kwargs")
	if err != nil || kwargs.IsNone() {
		return err
	}
	if !kwargs.IsDict() {
		return fmt.Errorf("%w: template kwargs must be a JSON object", ErrInput)
	}
	d := kwargs.AsDict()
	for _, name := range d.OrderedKeys() {
		if reservedNames[name] || strings.HasPrefix(name, privatePrefix) {
			return fmt.Errorf("%w: template kwarg %q is reserved", ErrInput, name)
		}
		vars[name], _ = d.Get(name)
	}
	return nil
}

// converter turns request JSON into engine values, objects as ordered dicts.
type converter struct {
	maxDepth int
}

// optional converts raw, giving None for an absent or null field.
func (c *converter) optional(raw json.RawMessage, field string) (jinja.Value, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return jinja.None(), nil
	}
	return c.convert(raw, field)
}

func (c *converter) convert(raw json.RawMessage, field string) (jinja.Value, error) {
	// Validated first, the value is then read in one pass over its bytes:
	// json.Decoder's tokens cost an allocation or more each.
	if !jsonvalid.Valid(raw) {
		return jinja.Undefined(), fmt.Errorf("%w: %s: %v", ErrInput, field, syntaxError(raw))
	}
	r := &jsonReader{b: raw}
	v, err := c.value(r, 0)
	if err != nil {
		if errors.Is(err, ErrInput) || errors.Is(err, ErrLimit) {
			return jinja.Undefined(), fmt.Errorf("%s: %w", field, err)
		}
		return jinja.Undefined(), fmt.Errorf("%w: %s: %v", ErrInput, field, err)
	}
	return v, nil
}

// syntaxError says why raw, which jsonvalid.Valid refused, is not JSON.
func syntaxError(raw []byte) error {
	var sink json.RawMessage
	if err := json.Unmarshal(raw, &sink); err != nil {
		return err
	}
	return errors.New("invalid JSON")
}

// jsonReader walks JSON that jsonvalid.Valid accepted.
type jsonReader struct {
	b []byte
	i int
}

// next skips white space and returns the byte at the cursor.
func (r *jsonReader) next() byte {
	for r.i < len(r.b) {
		switch c := r.b[r.i]; c {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return c
		}
	}
	return 0
}

// skip passes over the value at the cursor and returns where it starts and ends.
func (r *jsonReader) skip() (start, end int) {
	start = r.i
	depth := 0
	for ; r.i < len(r.b); r.i++ {
		switch r.b[r.i] {
		case '"':
			for r.i++; r.b[r.i] != '"'; r.i++ {
				if r.b[r.i] == '\\' {
					r.i++
				}
			}
			if depth == 0 {
				r.i++
				return start, r.i
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 { // the end of the enclosing object: a scalar just ended
				return start, r.i
			}
			depth--
			if depth == 0 {
				r.i++
				return start, r.i
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return start, r.i
			}
		}
	}
	return start, r.i
}

// str reads the string at the cursor as encoding/json decodes it: escapes
// resolved, invalid UTF-8 replaced.
func (r *jsonReader) str() (string, error) {
	start := r.i
	escaped := false
	r.i++
	for r.b[r.i] != '"' {
		if r.b[r.i] == '\\' {
			escaped = true
			r.i++
		}
		r.i++
	}
	r.i++
	inner := r.b[start+1 : r.i-1]
	if !escaped && utf8.Valid(inner) {
		return string(inner), nil
	}
	var s string
	err := json.Unmarshal(r.b[start:r.i], &s)
	return s, err
}

func (c *converter) value(r *jsonReader, depth int) (jinja.Value, error) {
	switch ch := r.next(); ch {
	case '[', '{':
		if depth >= c.maxDepth {
			return jinja.Undefined(), fmt.Errorf("%w: JSON nested deeper than %d", ErrLimit, c.maxDepth)
		}
		r.i++
		if ch == '[' {
			return c.array(r, depth+1)
		}
		return c.object(r, depth+1)
	case '"':
		s, err := r.str()
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewString(s), nil
	case 't':
		r.i += len("true")
		return jinja.NewBool(true), nil
	case 'f':
		r.i += len("false")
		return jinja.NewBool(false), nil
	case 'n':
		r.i += len("null")
		return jinja.None(), nil
	}
	start := r.i
	for r.i < len(r.b) && strings.IndexByte("+-0123456789.eE", r.b[r.i]) >= 0 {
		r.i++
	}
	return number(json.Number(r.b[start:r.i]))
}

func (c *converter) array(r *jsonReader, depth int) (jinja.Value, error) {
	var items []jinja.Value
	for r.next() != ']' {
		v, err := c.value(r, depth)
		if err != nil {
			return jinja.Undefined(), err
		}
		items = append(items, v)
		if r.next() == ',' {
			r.i++
		}
	}
	r.i++ // ]
	return jinja.NewList(items), nil
}

func (c *converter) object(r *jsonReader, depth int) (jinja.Value, error) {
	obj := jinja.NewDict()
	d := obj.AsDict()
	for r.next() != '}' {
		key, err := r.str()
		if err != nil {
			return jinja.Undefined(), err
		}
		r.next()
		r.i++ // :
		v, err := c.value(r, depth)
		if err != nil {
			return jinja.Undefined(), err
		}
		d.Set(key, v) // a repeated key keeps its first place and its last value, as in Python
		if r.next() == ',' {
			r.i++
		}
	}
	r.i++ // }
	return obj, nil
}

// number reads a JSON number as Python's json module does: an integer without a fraction or
// exponent, else a float. Python's integers are unbounded; one beyond int64 is refused rather than
// rendered differently.
func number(n json.Number) (jinja.Value, error) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return jinja.Undefined(), fmt.Errorf("%w: integer %s is beyond 64 bits", ErrInput, s)
		}
		return jinja.NewInt(i), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) { // out of range: ±Inf or 0, as Python reads it
		return jinja.Undefined(), fmt.Errorf("%w: number %s: %v", ErrInput, s, err)
	}
	return jinja.NewFloat(f), nil
}
