// Package outputcount counts the output tokens of a streamed answer as
// its bytes pass by, so that a live host can report a request's output
// progress (core.Core.Progress) at block boundaries.
//
// A Counter reads server-sent events line by line without keeping them:
// each "data:" line's JSON is lexed byte by byte with a fixed amount of
// state (the container depth, the member names on the path to the value
// being read, and the first bytes of the string being read), so chunks
// may split an event anywhere and nothing grows with the body. Lines
// longer than MaxLine are ignored, as are containers nested deeper than
// maxDepth.
//
// What counts, per event (one data line):
//
//   - an OpenAI chat or completions chunk whose choices carry output (a
//     non-empty delta.content, delta.reasoning_content or text, or a
//     tool call's strings) is one step: one more token;
//   - an Anthropic or Responses event whose top-level type is a delta
//     of generated output (content_block_delta, response.*.delta) is one
//     step;
//   - a usage count (OpenAI's usage.completion_tokens, Anthropic's
//     usage.output_tokens, Responses' response.usage.output_tokens) is
//     exact and replaces the count, whatever the event also carries.
//
// A step is one engine step's output: a frontend that sends several
// tokens in one event is undercounted until a usage count corrects it.
package outputcount

// MaxLine is the longest line a Counter reads; the rest of a longer line
// is skipped and its event not counted.
const MaxLine = 1 << 20

const (
	// maxDepth bounds the nesting a Counter follows; a deeper line is
	// skipped.
	maxDepth = 32
	// maxPath is the depth down to which member names are remembered;
	// every path a Counter looks for is shorter.
	maxPath = 5
	// maxCapture is the longest string whose bytes a Counter looks at
	// (member names and top-level types); longer ones match nothing.
	maxCapture = 40
	// maxCount caps a usage count: no answer has more tokens.
	maxCount = 1 << 40
)

// key is a member name a Counter looks for.
type key uint8

const (
	keyOther key = iota
	keyChoices
	keyDelta
	keyContent
	keyReasoningContent
	keyText
	keyToolCalls
	keyUsage
	keyCompletionTokens
	keyOutputTokens
	keyResponse
	keyType
)

func keyOf(name []byte) key {
	switch string(name) {
	case "choices":
		return keyChoices
	case "delta":
		return keyDelta
	case "content":
		return keyContent
	case "reasoning_content":
		return keyReasoningContent
	case "text":
		return keyText
	case "tool_calls":
		return keyToolCalls
	case "usage":
		return keyUsage
	case "completion_tokens":
		return keyCompletionTokens
	case "output_tokens":
		return keyOutputTokens
	case "response":
		return keyResponse
	case "type":
		return keyType
	}
	return keyOther
}

// Line modes.
const (
	lineStart uint8 = iota // matching "data:"
	payload                // lexing a data line's JSON
	skipLine               // ignoring the rest of the line
)

const dataField = "data:"

// Counter counts one answer's output tokens. Its zero value is not
// ready: use New.
type Counter struct {
	blockSize uint64
	report    func(tokens uint64)

	tokens   uint64 // the count so far
	reported uint64 // the count last reported

	mode    uint8
	matched int // bytes of "data:" matched
	lineLen int

	// The data line's JSON.
	depth   int
	arrays  uint64           // bit d: the container at depth d is an array
	keys    [maxPath + 1]key // keys[d]: the member of the object at depth d being read
	wantKey bool             // the next string of the object at depth is a member name
	inStr   bool
	esc     bool
	strLen  int
	capLen  int
	capture [maxCapture]byte
	inNum   bool
	num     uint64

	// What the event said.
	step      bool
	haveUsage bool
	usage     uint64
}

// New is a Counter that calls report with the count so far whenever it
// crosses a multiple of blockSize (0 counts as 1); report is called with
// increasing counts.
func New(blockSize uint64, report func(tokens uint64)) *Counter {
	return &Counter{blockSize: max(blockSize, 1), report: report}
}

// Tokens is the count so far.
func (c *Counter) Tokens() uint64 { return c.tokens }

// Write reads p, the next bytes of the stream; it never fails and keeps
// no reference to p.
func (c *Counter) Write(p []byte) (int, error) {
	for _, b := range p {
		c.byte(b)
	}
	return len(p), nil
}

func (c *Counter) byte(b byte) {
	if b == '\n' || b == '\r' {
		c.endLine()
		return
	}
	c.lineLen++
	if c.lineLen > MaxLine {
		c.mode = skipLine
	}
	switch c.mode {
	case lineStart:
		if b != dataField[c.matched] {
			c.mode = skipLine
			return
		}
		if c.matched++; c.matched == len(dataField) {
			c.mode = payload
		}
	case payload:
		c.lex(b)
	}
}

// endLine ends the line: a data line is one event.
func (c *Counter) endLine() {
	if c.mode == payload {
		c.endNumber()
		c.event()
	}
	c.mode, c.matched, c.lineLen = lineStart, 0, 0
	c.depth, c.arrays, c.keys, c.wantKey = 0, 0, [maxPath + 1]key{}, false
	c.inStr, c.esc, c.strLen, c.capLen, c.inNum, c.num = false, false, 0, 0, false, 0
	c.step, c.haveUsage, c.usage = false, false, 0
}

// event applies what one event said and reports a crossed block
// boundary.
func (c *Counter) event() {
	switch {
	case c.haveUsage:
		c.tokens = c.usage
	case c.step:
		c.tokens++
	default:
		return
	}
	if c.tokens/c.blockSize > c.reported/c.blockSize {
		c.reported = c.tokens
		c.report(c.tokens)
	}
}

func (c *Counter) lex(b byte) {
	if c.inStr {
		switch {
		case c.esc:
			c.esc = false
		case b == '\\':
			c.esc = true
			return
		case b == '"':
			c.inStr = false
			c.endString()
			return
		}
		if c.capLen < maxCapture {
			c.capture[c.capLen] = b
			c.capLen++
		}
		c.strLen++
		return
	}
	if b >= '0' && b <= '9' {
		if !c.inNum {
			c.inNum, c.num = true, 0
		}
		if c.num < maxCount {
			c.num = c.num*10 + uint64(b-'0')
		}
		return
	}
	c.endNumber()
	switch b {
	case '"':
		c.inStr, c.strLen, c.capLen = true, 0, 0
	case '{', '[':
		if c.depth == maxDepth {
			c.mode = skipLine
			return
		}
		c.depth++
		if c.depth <= maxPath {
			c.keys[c.depth] = keyOther
		}
		if b == '[' {
			c.arrays |= 1 << c.depth
		} else {
			c.arrays &^= 1 << c.depth
		}
		c.wantKey = b == '{'
	case '}', ']':
		if c.depth == 0 {
			c.mode = skipLine
			return
		}
		c.depth--
		c.wantKey = false
	case ',':
		c.wantKey = c.depth > 0 && c.arrays&(1<<c.depth) == 0
	case ':':
		c.wantKey = false
	}
}

// endNumber ends a number; an output count is kept.
func (c *Counter) endNumber() {
	if !c.inNum {
		return
	}
	c.inNum = false
	k := &c.keys
	switch {
	case c.depth == 2 && k[1] == keyUsage && (k[2] == keyCompletionTokens || k[2] == keyOutputTokens),
		c.depth == 3 && k[1] == keyResponse && k[2] == keyUsage && k[3] == keyOutputTokens:
		c.haveUsage, c.usage = true, min(c.num, maxCount)
	}
}

// endString ends a string: a member name, or a value that may be output.
func (c *Counter) endString() {
	if c.wantKey {
		c.wantKey = false
		if c.depth <= maxPath {
			name := keyOther
			if c.strLen == c.capLen {
				name = keyOf(c.capture[:c.capLen])
			}
			c.keys[c.depth] = name
		}
		return
	}
	k := &c.keys
	switch {
	case c.depth == 1 && k[1] == keyType:
		c.step = c.step || c.strLen == c.capLen && isDeltaType(c.capture[:c.capLen])
	case c.strLen == 0 || c.depth < 3 || k[1] != keyChoices:
	case c.depth == 3 && k[3] == keyText,
		c.depth == 4 && k[3] == keyDelta && (k[4] == keyContent || k[4] == keyReasoningContent),
		c.depth >= 5 && k[3] == keyDelta && k[4] == keyToolCalls:
		c.step = true
	}
}

// isDeltaType reports an event type that carries generated output:
// Anthropic's content_block_delta, the Responses API's response.*.delta.
func isDeltaType(t []byte) bool {
	s := string(t)
	const prefix, suffix = "response.", ".delta"
	return s == "content_block_delta" ||
		len(s) > len(prefix)+len(suffix) && s[:len(prefix)] == prefix && s[len(s)-len(suffix):] == suffix
}
