package gateway

// A minimal walker over JSON that jsonvalid.Valid has already accepted. It
// finds values by their byte spans without decoding or copying them, so
// a request body is read once, whatever it holds, and only the few
// members routing needs are decoded. Every index is bounds-checked: fed
// invalid JSON by mistake, it stops at the end of the input instead of
// panicking.

// jsonWalker is a cursor over valid JSON.
type jsonWalker struct {
	b []byte
	i int
}

// ws skips whitespace.
func (w *jsonWalker) ws() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// peek is the next non-space byte, 0 at the end.
func (w *jsonWalker) peek() byte {
	w.ws()
	if w.i < len(w.b) {
		return w.b[w.i]
	}
	return 0
}

// eat consumes c when it is the next non-space byte.
func (w *jsonWalker) eat(c byte) bool {
	if w.peek() == c {
		w.i++
		return true
	}
	return false
}

// value skips one value and returns its span.
func (w *jsonWalker) value() (start, end int) {
	w.ws()
	start = w.i
	if w.i >= len(w.b) {
		return start, start
	}
	switch w.b[w.i] {
	case '"':
		w.str()
	case '{', '[':
		w.nested()
	default: // a number or a literal: up to the next delimiter
		for w.i < len(w.b) && !isDelimiter(w.b[w.i]) {
			w.i++
		}
	}
	return start, w.i
}

func isDelimiter(c byte) bool {
	switch c {
	case ',', ':', ']', '}', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// str skips a string, the cursor on its opening quote.
func (w *jsonWalker) str() {
	w.i++
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case '\\':
			w.i += 2
		case '"':
			w.i++
			return
		default:
			w.i++
		}
	}
	w.i = min(w.i, len(w.b))
}

// nested skips an object or array by counting brackets outside strings;
// it needs no stack, as the input is valid.
func (w *jsonWalker) nested() {
	depth := 0
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case '"':
			w.str()
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				w.i++
				return
			}
		}
		w.i++
	}
}

// members calls f for each member of the object at the cursor, with the
// raw key (quotes included) and the cursor on the value; f must consume
// the value. It reports false when the next value is not an object or f
// stops the walk.
func (w *jsonWalker) members(f func(key []byte, keyStart int) bool) bool {
	if !w.eat('{') {
		return false
	}
	if w.eat('}') {
		return true
	}
	for {
		w.ws()
		ks, ke := w.value()
		if !w.eat(':') {
			return false
		}
		if !f(w.b[ks:ke], ks) {
			return false
		}
		if !w.eat(',') {
			return w.eat('}')
		}
	}
}

// elements calls f for each element of the array at the cursor, with the
// cursor on the element; f must consume it. It reports false when the
// next value is not an array or f stops the walk.
func (w *jsonWalker) elements(f func() bool) bool {
	if !w.eat('[') {
		return false
	}
	if w.eat(']') {
		return true
	}
	for {
		if !f() {
			return false
		}
		if !w.eat(',') {
			return w.eat(']')
		}
	}
}

// keyIs reports whether a raw JSON key (quotes included) decodes to name,
// an ASCII identifier. Escaped keys are decoded without allocating: a
// client cannot hide "model" as "mod\u0065l" from the gateway while the
// upstream, which decodes keys, reads it.
func keyIs(raw []byte, name string) bool {
	if len(raw) < 2 {
		return false
	}
	inner := raw[1 : len(raw)-1]
	if len(inner) == len(name) && string(inner) == name {
		return true
	}
	// An escape takes at least two bytes for one; "\uXXXX" six.
	if len(inner) <= len(name) || len(inner) > 6*len(name) {
		return false
	}
	j := 0
	for i := 0; i < len(inner); j++ {
		if j >= len(name) {
			return false
		}
		c := inner[i]
		if c != '\\' {
			if c != name[j] {
				return false
			}
			i++
			continue
		}
		d, n := unescapeASCII(inner[i:])
		if n == 0 || d != name[j] {
			return false
		}
		i += n
	}
	return j == len(name)
}

// unescapeASCII decodes one escape at the start of s when it stands for
// an ASCII character, returning the byte and the escape's length (0 when
// it is not one).
func unescapeASCII(s []byte) (byte, int) {
	if len(s) < 2 {
		return 0, 0
	}
	switch s[1] {
	case '"', '\\', '/':
		return s[1], 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		if len(s) < 6 {
			return 0, 0
		}
		v := 0
		for _, h := range s[2:6] {
			v <<= 4
			switch {
			case h >= '0' && h <= '9':
				v |= int(h - '0')
			case h >= 'a' && h <= 'f':
				v |= int(h-'a') + 10
			case h >= 'A' && h <= 'F':
				v |= int(h-'A') + 10
			default:
				return 0, 0
			}
		}
		if v < 0x80 {
			return byte(v), 6
		}
	}
	return 0, 0
}
