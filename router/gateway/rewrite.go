package gateway

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"

	"switchyard/router/config"
	"switchyard/router/jsonvalid"
	"switchyard/router/metrics"
)

// promptRewrite is what one backend does to every chat completions body
// it is sent: its global prompts go first as system messages, then, when
// its frontend requires it, every system message is merged into one
// leading system message. nil rewrites nothing.
type promptRewrite struct {
	// globals are the global prompts, each encoded as a system message.
	globals [][]byte
	// single: at most one system message, first.
	single bool
	// warned notes the results already logged for this backend, so a
	// client repeating a body cannot flood the log; indexed like
	// metrics.RewriteResults.
	warned [4]atomic.Bool
}

// newPromptRewrite is b's rewrite, nil when it has none.
func newPromptRewrite(b config.Backend) *promptRewrite {
	if len(b.GlobalPrompts) == 0 && !b.RequiresSingleLeadingSystem {
		return nil
	}
	rw := &promptRewrite{single: b.RequiresSingleLeadingSystem}
	for _, s := range b.GlobalPrompts {
		rw.globals = append(rw.globals, systemMessage(nil, s))
	}
	return rw
}

// same reports whether rw and o rewrite every body alike.
func (rw *promptRewrite) same(o *promptRewrite) bool {
	if rw == nil || o == nil {
		return rw == o
	}
	return rw.single == o.single && slices.EqualFunc(rw.globals, o.globals, bytes.Equal)
}

// systemMessage appends {"role":"system","content":text} to dst.
func systemMessage(dst []byte, text string) []byte {
	dst = append(dst, `{"role":"system","content":`...)
	return append(appendJSONString(dst, text), '}')
}

// appendJSONString appends s as a JSON string, leaving <, > and & as
// they are (a chat template sees the decoded text either way).
func appendJSONString(dst []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...)
}

// maxRewriteMessages bounds the messages a rewrite reads: as many as the
// ingress accepts, plus the global prompts.
const maxRewriteMessages = maxMessages + config.MaxGlobalPrompts

// apply returns body rewritten, and a metrics.Rewrite* result ("" when
// there was nothing to do). The messages array alone is re-encoded:
// every other member of the body stays byte for byte, and every message
// not merged keeps its own bytes. Anything it cannot read is sent as it
// was, for the upstream to judge.
func (rw *promptRewrite) apply(body []byte) ([]byte, string) {
	if rw == nil {
		return body, ""
	}
	start, end, ok := messagesSpan(body)
	if !ok {
		return body, metrics.RewriteUnreadable
	}
	msgs, ok := arrayElements(body[start:end], maxRewriteMessages-len(rw.globals))
	if !ok {
		return body, metrics.RewriteTooManyMessages
	}
	all := make([][]byte, 0, len(rw.globals)+len(msgs))
	all = append(append(all, rw.globals...), msgs...)
	changed := len(rw.globals) > 0
	if rw.single {
		merged, result := mergeSystem(all)
		if result != "" {
			return body, result
		}
		if merged != nil {
			all, changed = merged, true
		}
	}
	if !changed {
		return body, "" // already at most one system message, leading
	}
	out := make([]byte, 0, len(body)+rewriteGrowth(all))
	out = append(out, body[:start]...)
	out = append(out, '[')
	out = append(out, bytes.Join(all, []byte{','})...)
	out = append(out, ']')
	return append(out, body[end:]...), metrics.RewriteRewritten
}

func rewriteGrowth(msgs [][]byte) int {
	n := len(msgs) + 2
	for _, m := range msgs {
		n += len(m)
	}
	return n
}

// messagesSpan finds the value of the body's top-level "messages" member:
// an array, named once, in a valid JSON object.
func messagesSpan(body []byte) (start, end int, ok bool) {
	if !jsonvalid.Valid(body) {
		return 0, 0, false
	}
	w := &jsonWalker{b: body}
	if w.peek() != '{' {
		return 0, 0, false
	}
	found, twice := false, false
	w.members(func(key []byte, _ int) bool {
		s, e := w.value()
		if !keyIs(key, "messages") {
			return true
		}
		if found {
			twice = true
			return false
		}
		found, start, end = true, s, e
		return true
	})
	if !found || twice || start >= len(body) || body[start] != '[' {
		return 0, 0, false
	}
	return start, end, true
}

// arrayElements lists the raw elements of a valid JSON array, at most
// limit of them.
func arrayElements(arr []byte, limit int) ([][]byte, bool) {
	var out [][]byte
	w := &jsonWalker{b: arr}
	ok := true
	w.elements(func() bool {
		if len(out) >= limit {
			ok = false
			return false
		}
		s, e := w.value()
		out = append(out, arr[s:e])
		return true
	})
	return out, ok
}

// mergeSystem merges the system messages of msgs into one, first, their
// texts joined by a blank line in order; the other messages follow in
// order. It returns nil when there is at most one system message and it
// leads already, or a result when a system message cannot be merged.
func mergeSystem(msgs [][]byte) ([][]byte, string) {
	first := -1
	var texts []string
	var rest [][]byte
	for i, m := range msgs {
		role, content, ok := roleAndContent(m)
		if !ok {
			return nil, metrics.RewriteUnreadable
		}
		if role != "system" {
			rest = append(rest, m)
			continue
		}
		text, present, ok := systemText(content)
		if !ok {
			return nil, metrics.RewriteNonTextSystem
		}
		if first < 0 {
			first = i
		}
		if present {
			texts = append(texts, text)
		}
	}
	if first < 0 || (first == 0 && len(rest) == len(msgs)-1) {
		return nil, ""
	}
	merged := withContent(msgs[first], strings.Join(texts, "\n\n"))
	return append([][]byte{merged}, rest...), ""
}

// roleAndContent reads a message's role (decoded) and raw content (nil
// when absent). A message that is not an object has no role; one naming
// role or content twice is unreadable (decoders disagree on which wins).
func roleAndContent(msg []byte) (role string, content []byte, ok bool) {
	w := &jsonWalker{b: msg}
	if w.peek() != '{' {
		return "", nil, true
	}
	seenRole, ok := false, true
	w.members(func(key []byte, _ int) bool {
		s, e := w.value()
		switch {
		case keyIs(key, "role"):
			if seenRole {
				ok = false
				return false
			}
			seenRole = true
			if msg[s] == '"' {
				role, _ = decodeKey(msg[s:e])
			}
		case keyIs(key, "content"):
			if content != nil {
				ok = false
				return false
			}
			content = msg[s:e]
		}
		return true
	})
	return role, content, ok
}

// systemText is a system message content's text: a string or the texts
// of a list of text parts; an absent or null content has none (present
// false). Anything else is not text (ok false).
func systemText(content []byte) (text string, present, ok bool) {
	if content == nil {
		return "", false, true
	}
	switch content[0] {
	case '"':
		text, ok = decodeKey(content)
	case 'n':
		return "", false, true
	case '[':
		text, ok = textParts(content)
	}
	return text, ok, ok
}

// textParts joins the texts of a list of {"type":"text","text":...}
// parts, as chat templates concatenate them.
func textParts(list []byte) (string, bool) {
	var sb strings.Builder
	w := &jsonWalker{b: list}
	ok := true
	w.elements(func() bool {
		s, e := w.value()
		text, isText := partText(list[s:e])
		if !isText {
			ok = false
			return false
		}
		sb.WriteString(text)
		return true
	})
	return sb.String(), ok
}

// partText reads one content part: its text when it is a text part.
func partText(part []byte) (string, bool) {
	w := &jsonWalker{b: part}
	if w.peek() != '{' {
		return "", false
	}
	var typ, text []byte
	dup := false
	w.members(func(key []byte, _ int) bool {
		s, e := w.value()
		switch {
		case keyIs(key, "type"):
			dup = dup || typ != nil
			typ = part[s:e]
		case keyIs(key, "text"):
			dup = dup || text != nil
			text = part[s:e]
		}
		return !dup
	})
	if dup || typ == nil || text == nil || text[0] != '"' {
		return "", false
	}
	if t, ok := decodeKey(typ); !ok || t != "text" {
		return "", false
	}
	return decodeKey(text)
}

// withContent is msg with its content member's value replaced by text as
// a JSON string (added last when it has none); its other members stay as
// they were, in their order.
func withContent(msg []byte, text string) []byte {
	value := appendJSONString(nil, text)
	out := make([]byte, 0, len(msg)+len(value)+12)
	out = append(out, '{')
	w := &jsonWalker{b: msg}
	replaced, n := false, 0
	w.members(func(key []byte, ks int) bool {
		_, e := w.value()
		if n > 0 {
			out = append(out, ',')
		}
		n++
		if keyIs(key, "content") {
			replaced = true
			out = append(append(append(out, key...), ':'), value...)
			return true
		}
		out = append(out, msg[ks:e]...)
		return true
	})
	if !replaced {
		if n > 0 {
			out = append(out, ',')
		}
		out = append(append(out, `"content":`...), value...)
	}
	return append(out, '}')
}

// rewriteMemo is one rewritten chat body: base as rw rewrote it.
type rewriteMemo struct {
	rw   *promptRewrite
	base []byte
	out  []byte
}

// rewritten is the chat body base as b is sent it. The last result is
// kept: a request's render and sends rewrite one base, and replicas of a
// pool usually rewrite alike.
func (x *exchange) rewritten(b *backend, base []byte) []byte {
	if b.rw == nil {
		return base
	}
	m := &x.rewrite
	if m.rw != nil && m.rw.same(b.rw) && sameBuffer(m.base, base) {
		return m.out
	}
	out, result := b.rw.apply(base)
	x.g.noteRewrite(b, result)
	*m = rewriteMemo{rw: b.rw, base: base, out: out}
	return out
}

// sameBuffer reports whether a and b are the same bytes in memory.
func sameBuffer(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// noteRewrite counts a rewrite's result and logs a body sent as it was,
// once per result for each backend's configuration.
func (g *Gateway) noteRewrite(b *backend, result string) {
	if result == "" {
		return
	}
	g.metrics.CountPromptRewrite(result)
	if result == metrics.RewriteRewritten {
		return
	}
	i := slices.Index(metrics.RewriteResults, result)
	if i < 0 || i >= len(b.rw.warned) || b.rw.warned[i].Swap(true) {
		return
	}
	g.log.Warn("chat body sent without the backend's prompt rewrite (logged once per backend until reload)",
		"backend", b.name, "result", result, "why", rewriteWhy(result))
}

func rewriteWhy(result string) string {
	switch result {
	case metrics.RewriteNonTextSystem:
		return "a system message holds other than text, so system messages cannot be merged into one"
	case metrics.RewriteTooManyMessages:
		return "more messages than the gateway reads"
	}
	return "no messages array, or a message names role or content twice"
}
