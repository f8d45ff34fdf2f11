package template

import (
	"fmt"
	"strings"
)

// rewriteSource prepares a template for the engine. The engine cannot be configured, so the few
// places where it must call this package are written into the source, which changes nothing else:
//
//   - every |tojson names this package's filter: the engine looks its built-in filters up before
//     the template's variables, and its tojson is not Python's ({% filter tojson %} blocks keep the
//     built-in, the only filter such a block can name; on the string a block yields both agree);
//   - every macro body starts and ends with a call that counts macros in progress, so that runaway
//     recursion stops with ErrLimit instead of exhausting the goroutine's stack, which no recover
//     catches; the inserted tags repeat the macro tags' whitespace markers, so trim_blocks and
//     lstrip_blocks strip exactly what they stripped before.
//
// Newlines are normalised first, as Jinja2's lexer does. It also bounds what the engine's recursive-descent parser would recurse on: a tag's length,
// nested blocks and nested brackets.
func rewriteSource(src string, limits Limits) (string, error) {
	r := rewriter{src: normalizeNewlines(src), limits: limits}
	r.out.Grow(len(src) + len(src)/8)
	if err := r.run(); err != nil {
		return "", err
	}
	return r.out.String(), nil
}

type rewriter struct {
	src    string
	limits Limits
	out    strings.Builder
	pos    int
	blocks int // blocks open at pos
}

// Block statements that take an end tag; set does when it has no "=".
var blockOpeners = map[string]bool{"if": true, "for": true, "macro": true, "call": true, "filter": true, "block": true}

func (r *rewriter) run() error {
	for r.pos < len(r.src) {
		start := r.nextTagStart()
		r.out.WriteString(r.src[r.pos:start])
		r.pos = start
		if start == len(r.src) {
			return nil
		}
		var err error
		switch r.src[start+1] {
		case '#':
			r.copyComment()
		case '{':
			err = r.expression()
		case '%':
			err = r.statement()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// nextTagStart finds the next "{{", "{%" or "{#" at or after pos, or the end of the source.
func (r *rewriter) nextTagStart() int {
	for i := r.pos; i+1 < len(r.src); i++ {
		if r.src[i] == '{' && strings.IndexByte("{%#", r.src[i+1]) >= 0 {
			return i
		}
	}
	return len(r.src)
}

func (r *rewriter) copyComment() {
	end := strings.Index(r.src[r.pos+2:], "#}")
	if end < 0 {
		r.out.WriteString(r.src[r.pos:]) // unclosed: the engine reports it
		r.pos = len(r.src)
		return
	}
	end += r.pos + 4
	r.out.WriteString(r.src[r.pos:end])
	r.pos = end
}

// tagBody returns the text between the tag's delimiters at pos and the index after its end.
func (r *rewriter) tagBody(closing string) (body string, next int, err error) {
	end, err := findTagEnd(r.src, r.pos+2, closing)
	if err != nil {
		return "", 0, err
	}
	if end-r.pos > r.limits.MaxTagBytes {
		return "", 0, fmt.Errorf("%w: a tag of %d bytes is over the limit of %d", ErrTooLarge, end-r.pos, r.limits.MaxTagBytes)
	}
	body = r.src[r.pos+2 : end]
	if err := checkBrackets(body, r.limits.MaxNesting); err != nil {
		return "", 0, err
	}
	return body, end + 2, nil
}

func (r *rewriter) expression() error {
	body, next, err := r.tagBody("}}")
	if err != nil {
		return err
	}
	r.out.WriteString("{{")
	r.out.WriteString(renameToJSON(body))
	r.out.WriteString("}}")
	r.pos = next
	return nil
}

func (r *rewriter) statement() error {
	body, next, err := r.tagBody("%}")
	if err != nil {
		return err
	}
	left, right := markers(body)
	keyword, rest := splitKeyword(body)
	if keyword == "raw" {
		return r.copyRaw(next)
	}
	if err := r.trackBlocks(keyword, rest); err != nil {
		return err
	}
	if keyword == "endmacro" {
		fmt.Fprintf(&r.out, "{%%%s set %s = %s() %%}", left, nameDepthVar, nameLeave)
	}
	r.out.WriteString("{%")
	r.out.WriteString(renameToJSON(body))
	r.out.WriteString("%}")
	if keyword == "macro" {
		fmt.Fprintf(&r.out, "{%% set %s = %s() %s%%}", nameDepthVar, nameEnter, right)
	}
	r.pos = next
	return nil
}

func (r *rewriter) trackBlocks(keyword, rest string) error {
	switch {
	case blockOpeners[keyword] || (keyword == "set" && !hasAssignment(rest)):
		r.blocks++
		if r.blocks > r.limits.MaxNesting {
			return fmt.Errorf("%w: blocks nested deeper than %d", ErrLimit, r.limits.MaxNesting)
		}
	case strings.HasPrefix(keyword, "end"):
		r.blocks = max(r.blocks-1, 0)
	}
	return nil
}

// copyRaw copies a {% raw %} block up to and including its {% endraw %}, untouched.
func (r *rewriter) copyRaw(afterOpen int) error {
	for i := afterOpen; i+1 < len(r.src); i++ {
		if r.src[i] != '{' || r.src[i+1] != '%' {
			continue
		}
		end, err := findTagEnd(r.src, i+2, "%}")
		if err != nil {
			break
		}
		if keyword, _ := splitKeyword(r.src[i+2 : end]); keyword == "endraw" {
			r.out.WriteString(r.src[r.pos : end+2])
			r.pos = end + 2
			return nil
		}
	}
	r.out.WriteString(r.src[r.pos:]) // unclosed: the engine reports it
	r.pos = len(r.src)
	return nil
}

// findTagEnd returns the index of closing at or after from, skipping string literals.
func findTagEnd(src string, from int, closing string) (int, error) {
	var quote byte
	for i := from; i < len(src); i++ {
		c := src[i]
		switch {
		case quote != 0 && c == '\\':
			i++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case strings.HasPrefix(src[i:], closing):
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: a tag opened at byte %d is not closed with %q", ErrSyntax, from-2, closing)
}

// eachCode calls fn for every byte of body outside string literals, with its index.
func eachCode(body string, fn func(i int)) {
	var quote byte
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case quote != 0 && c == '\\':
			i++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		default:
			fn(i)
		}
	}
}

func checkBrackets(body string, limit int) error {
	depth, deepest := 0, 0
	eachCode(body, func(i int) {
		switch body[i] {
		case '(', '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ')', ']', '}':
			depth--
		}
	})
	if deepest > limit {
		return fmt.Errorf("%w: brackets nested deeper than %d", ErrLimit, limit)
	}
	return nil
}

func hasAssignment(rest string) bool {
	found := false
	eachCode(rest, func(i int) {
		if rest[i] == '=' {
			found = true
		}
	})
	return found
}

// renameToJSON points the filter name tojson, after a "|" outside string literals, at this
// package's filter.
func renameToJSON(body string) string {
	if !strings.Contains(body, "tojson") {
		return body
	}
	var at []int
	eachCode(body, func(i int) {
		if body[i] != '|' {
			return
		}
		if j := skipSpace(body, i+1); isWord(body, j, "tojson") {
			at = append(at, j)
		}
	})
	if len(at) == 0 {
		return body
	}
	var sb strings.Builder
	last := 0
	for _, j := range at {
		sb.WriteString(body[last:j])
		sb.WriteString(nameToJSON)
		last = j + len("tojson")
	}
	sb.WriteString(body[last:])
	return sb.String()
}

func skipSpace(s string, i int) int {
	for i < len(s) && strings.IndexByte(" \t\r\n", s[i]) >= 0 {
		i++
	}
	return i
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// isWord reports whether the identifier word stands alone at s[i:].
func isWord(s string, i int, word string) bool {
	if !strings.HasPrefix(s[i:], word) {
		return false
	}
	end := i + len(word)
	return end == len(s) || !isIdentByte(s[end])
}

// splitKeyword returns a statement's first word and what follows it, past the whitespace markers.
func splitKeyword(body string) (keyword, rest string) {
	i := 0
	if i < len(body) && (body[i] == '-' || body[i] == '+') {
		i++
	}
	i = skipSpace(body, i)
	j := i
	for j < len(body) && isIdentByte(body[j]) {
		j++
	}
	return body[i:j], body[j:]
}

// markers returns a statement's "-" whitespace-control markers ("" when absent) on each side. The
// engine does not know the "+" marker: a template using it fails to parse.
func markers(body string) (left, right string) {
	if strings.HasPrefix(body, "-") {
		left = "-"
	}
	if strings.HasSuffix(body, "-") {
		right = "-"
	}
	return left, right
}

// normalizeNewlines does what Jinja2's lexer does to a source before anything else: every "\r\n"
// and "\r" becomes "\n", and one final newline is dropped (keep_trailing_newline is off).
func normalizeNewlines(src string) string {
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}
