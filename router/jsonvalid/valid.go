// Package jsonvalid checks that bytes are one JSON value, accepting exactly
// what encoding/json.Valid accepts, in one pass and without allocating.
//
// Request bodies are checked before the gateway's walker and the prompt
// template's cursor read them (both assume valid input), so the check runs
// on every request. encoding/json's scanner calls a state function per
// byte; this one loops over strings and numbers directly, about twice as
// fast on the bodies chat clients send (docs/benchmarks.md).
package jsonvalid

// MaxDepth is the deepest nesting of arrays and objects accepted: the same
// bound as encoding/json's decoder and Valid.
const MaxDepth = 10000

// Valid reports whether b is exactly one JSON value, with optional
// whitespace around it. Like encoding/json.Valid it does not check that
// strings are valid UTF-8.
func Valid(b []byte) bool {
	v := validator{b: b}
	v.ws()
	if !v.value() {
		return false
	}
	v.ws()
	return v.i == len(b)
}

// validator walks b iteratively; the open containers are a bit stack
// (1 for an object), so depth costs no allocation and no recursion.
type validator struct {
	b     []byte
	i     int
	depth int
	stack [(MaxDepth + 63) / 64]uint64
}

// push opens a container; value has checked the depth.
func (v *validator) push(object bool) {
	word, bit := v.depth/64, uint(v.depth%64)
	if object {
		v.stack[word] |= 1 << bit
	} else {
		v.stack[word] &^= 1 << bit
	}
	v.depth++
}

// inObject reports whether the innermost open container is an object.
func (v *validator) inObject() bool {
	d := v.depth - 1
	return v.stack[d/64]&(1<<uint(d%64)) != 0
}

func (v *validator) ws() {
	for v.i < len(v.b) {
		switch v.b[v.i] {
		case ' ', '\t', '\n', '\r':
			v.i++
		default:
			return
		}
	}
}

// value checks one value, containers included: each opening bracket is
// pushed, and after every element the loop reads a comma or the closing
// bracket of the innermost container.
func (v *validator) value() bool {
	for {
		// One element (or the first of a container's).
		if v.i >= len(v.b) {
			return false
		}
		switch c := v.b[v.i]; {
		case (c == '{' || c == '[') && v.depth == MaxDepth: // an empty one counts too
			return false
		case c == '{':
			v.i++
			v.ws()
			if v.i < len(v.b) && v.b[v.i] == '}' {
				v.i++
				break
			}
			v.push(true)
			if !v.key() {
				return false
			}
			continue
		case c == '[':
			v.i++
			v.ws()
			if v.i < len(v.b) && v.b[v.i] == ']' {
				v.i++
				break
			}
			v.push(false)
			continue
		case c == '"':
			if !v.str() {
				return false
			}
		case c == '-' || '0' <= c && c <= '9':
			if !v.number() {
				return false
			}
		case c == 't':
			if !v.literal("true") {
				return false
			}
		case c == 'f':
			if !v.literal("false") {
				return false
			}
		case c == 'n':
			if !v.literal("null") {
				return false
			}
		default:
			return false
		}
		// After an element: close containers until one continues.
		for {
			if v.depth == 0 {
				return true
			}
			v.ws()
			if v.i >= len(v.b) {
				return false
			}
			c := v.b[v.i]
			v.i++
			object := v.inObject()
			if c == ',' {
				v.ws()
				if object && !v.key() {
					return false
				}
				break
			}
			if object && c == '}' || !object && c == ']' {
				v.depth--
				continue
			}
			return false
		}
	}
}

// key checks `"name" :` and the whitespace before the member's value.
func (v *validator) key() bool {
	if v.i >= len(v.b) || v.b[v.i] != '"' || !v.str() {
		return false
	}
	v.ws()
	if v.i >= len(v.b) || v.b[v.i] != ':' {
		return false
	}
	v.i++
	v.ws()
	return true
}

// plain marks the string bytes that need no look: not a quote, a
// backslash or a control character.
var plain = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

// str checks a string starting at its opening quote.
func (v *validator) str() bool {
	v.i++
	for {
		for v.i < len(v.b) && plain[v.b[v.i]] {
			v.i++
		}
		if v.i >= len(v.b) {
			return false
		}
		switch v.b[v.i] {
		case '"':
			v.i++
			return true
		case '\\':
			if v.i+1 >= len(v.b) {
				return false
			}
			switch v.b[v.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				v.i += 2
			case 'u':
				if v.i+6 > len(v.b) {
					return false
				}
				for _, h := range v.b[v.i+2 : v.i+6] {
					if !isHex(h) {
						return false
					}
				}
				v.i += 6
			default:
				return false
			}
		default: // a control character
			return false
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (v *validator) number() bool {
	if v.b[v.i] == '-' {
		v.i++
	}
	if v.i >= len(v.b) {
		return false
	}
	switch c := v.b[v.i]; {
	case c == '0':
		v.i++
	case '1' <= c && c <= '9':
		v.digits()
	default:
		return false
	}
	if v.i < len(v.b) && v.b[v.i] == '.' {
		v.i++
		if !v.digits() {
			return false
		}
	}
	if v.i < len(v.b) && (v.b[v.i] == 'e' || v.b[v.i] == 'E') {
		v.i++
		if v.i < len(v.b) && (v.b[v.i] == '+' || v.b[v.i] == '-') {
			v.i++
		}
		if !v.digits() {
			return false
		}
	}
	return true
}

// digits consumes one or more decimal digits.
func (v *validator) digits() bool {
	start := v.i
	for v.i < len(v.b) && '0' <= v.b[v.i] && v.b[v.i] <= '9' {
		v.i++
	}
	return v.i > start
}

func (v *validator) literal(word string) bool {
	if len(v.b)-v.i < len(word) || string(v.b[v.i:v.i+len(word)]) != word {
		return false
	}
	v.i += len(word)
	return true
}
