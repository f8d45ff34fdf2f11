package workload

// parseTraceLine decodes the common shape of a Mooncake line, an object of
// exactly the four known keys (any order, each once) with integer values, as
// json.Unmarshal would. Anything else (other or repeated keys, other value
// forms, numbers out of range) reports false and the caller asks
// encoding/json, so every line decodes as json.Unmarshal decodes it. A
// trace is thousands of such lines; reflection spent a twentieth of a run
// on them.
func parseTraceLine(raw []byte, rec *traceLine) bool {
	p := lineParser{b: raw}
	if !p.byte('{') {
		return false
	}
	var ts int64
	var in, out int
	var ids []uint64
	var seen uint8
	for k := 0; k < 4; k++ {
		if k > 0 && !p.byte(',') {
			return false
		}
		key, ok := p.key()
		if !ok || !p.byte(':') {
			return false
		}
		var bit uint8
		switch key {
		case "timestamp":
			bit, ok = 1, p.int(&ts)
		case "input_length":
			var v int64
			bit, ok = 2, p.int(&v)
			in = int(v)
		case "output_length":
			var v int64
			bit, ok = 4, p.int(&v)
			out = int(v)
		case "hash_ids":
			bit = 8
			ids, ok = p.uints()
		}
		if !ok || bit == 0 || seen&bit != 0 {
			return false
		}
		seen |= bit
	}
	if !p.byte('}') || p.skipSpace() != len(p.b) {
		return false
	}
	rec.Timestamp, rec.InputLength, rec.OutputLength, rec.HashIDs = &ts, &in, &out, ids
	return true
}

type lineParser struct {
	b []byte
	i int
}

func (p *lineParser) skipSpace() int {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return p.i
		}
	}
	return p.i
}

// byte consumes c after optional whitespace.
func (p *lineParser) byte(c byte) bool {
	if p.skipSpace() < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// key reads a string of plain lowercase letters and underscores (the
// known keys; an escape or another byte goes to encoding/json).
func (p *lineParser) key() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			k := string(p.b[start:p.i]) // the switch's comparison does not allocate
			p.i++
			return k, true
		}
		if (c < 'a' || c > 'z') && c != '_' {
			return "", false
		}
		p.i++
	}
	return "", false
}

// digits reads a JSON integer's digits (no leading zero but "0") as a
// uint64, refusing more than 19 digits so it cannot overflow.
func (p *lineParser) digits() (uint64, bool) {
	start := p.i
	var v uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		v = v*10 + uint64(p.b[p.i]-'0')
		p.i++
	}
	n := p.i - start
	if n == 0 || n > 19 || (n > 1 && p.b[start] == '0') {
		return 0, false
	}
	// A fraction or exponent makes it no integer.
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	return v, true
}

func (p *lineParser) int(v *int64) bool {
	neg := false
	if p.skipSpace() < len(p.b) && p.b[p.i] == '-' {
		neg = true
		p.i++
	}
	u, ok := p.digits()
	if !ok || u > 1<<63-1 {
		return false
	}
	*v = int64(u)
	if neg {
		*v = -*v
	}
	return true
}

// uints reads an array of non-negative integers (non-nil when empty, as
// encoding/json leaves it).
func (p *lineParser) uints() ([]uint64, bool) {
	if !p.byte('[') {
		return nil, false
	}
	// Count the commas first, so the slice is allocated once.
	n := 1
	for _, c := range p.b[p.i:] {
		if c == ',' {
			n++
		} else if c == ']' {
			break
		}
	}
	ids := make([]uint64, 0, n)
	if p.byte(']') {
		return ids, true
	}
	for {
		p.skipSpace()
		v, ok := p.digits()
		if !ok {
			return nil, false
		}
		ids = append(ids, v)
		if p.byte(']') {
			return ids, true
		}
		if !p.byte(',') {
			return nil, false
		}
	}
}
