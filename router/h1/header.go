package h1

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// ErrFolded reports an obsolete line folding (a header line starting with
// white space), which both ends refuse as request smuggling material.
var ErrFolded = errors.New("h1: folded header line")

// SplitHeaderLine splits "Name: value": the name is canonicalized, and the
// value trimmed and left in line's bytes.
func SplitHeaderLine(line []byte) (string, []byte, error) {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			return "", nil, ErrFolded
		}
		return "", nil, fmt.Errorf("h1: malformed header line %q", Clip(line))
	}
	name := line[:colon]
	if !ValidHeaderName(name) {
		return "", nil, fmt.Errorf("h1: invalid header name %q", Clip(name))
	}
	value := bytes.Trim(line[colon+1:], " \t")
	if !ValidHeaderValue(value) {
		return "", nil, fmt.Errorf("h1: invalid value for header %q", Clip(name))
	}
	return CanonicalKey(name), value, nil
}

// Interner keeps the header values a connection's messages repeat (a
// client sends the same Content-Type, User-Agent, Accept... with every
// request, a server the same Content-Type and Server with every answer),
// so each is allocated once per connection rather than once per message.
// It is small and bounded: a peer cannot grow it. One goroutine at a time
// uses it; the zero value is ready.
type Interner struct {
	values map[string]string
}

const (
	maxInterned         = 32
	maxInternedValueLen = 128
)

// Intern is b as a string, the one kept when b was seen before.
func (c *Interner) Intern(b []byte) string {
	if v, ok := c.values[string(b)]; ok {
		return v
	}
	v := string(b)
	if len(b) <= maxInternedValueLen && len(c.values) < maxInterned {
		if c.values == nil {
			c.values = make(map[string]string, 8)
		}
		c.values[v] = v
	}
	return v
}

// commonKeys are header names requests and answers usually carry, so their
// canonical form is not allocated anew per message.
var commonKeys = map[string]string{}

func init() {
	for _, k := range []string{
		"Content-Type", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Date", "Server",
		"Cache-Control", "Vary", "X-Request-Id", "Access-Control-Allow-Origin", "Access-Control-Allow-Credentials",
		"Access-Control-Expose-Headers", "Retry-After", "Content-Encoding", "X-Accel-Buffering", "Trailer",
		"Host", "User-Agent", "Accept", "Accept-Encoding", "Authorization", "Expect", "X-Api-Key",
		"Anthropic-Version", "Anthropic-Beta", "Traceparent", "Tracestate", "X-Forwarded-For", "Origin",
	} {
		commonKeys[k] = k
	}
}

// CanonicalKey is the canonical form of a valid header name (as
// textproto.CanonicalMIMEHeaderKey), rewriting b in place.
func CanonicalKey(b []byte) string {
	upper := true
	for i, c := range b {
		switch {
		case upper && 'a' <= c && c <= 'z':
			b[i] = c - ('a' - 'A')
		case !upper && 'A' <= c && c <= 'Z':
			b[i] = c + ('a' - 'A')
		}
		upper = c == '-'
	}
	if k, ok := commonKeys[string(b)]; ok {
		return k
	}
	return string(b)
}

// ValidHeaderName reports whether s is an RFC 9110 token.
func ValidHeaderName[T string | []byte](s T) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !IsTokenChar(s[i]) {
			return false
		}
	}
	return true
}

// IsTokenChar reports whether c may appear in an RFC 9110 token.
func IsTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// ValidHeaderValue rejects control characters (tab aside), which could
// end the header line early.
func ValidHeaderValue[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// HasToken reports whether the comma-separated list v holds token,
// ignoring case.
func HasToken(v, token string) bool {
	for part := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(strings.TrimSpace(part), token) {
			return true
		}
	}
	return false
}

// ConnectionHas reports whether a Connection header of h lists token.
func ConnectionHas(h http.Header, token string) bool {
	for _, v := range h["Connection"] {
		if HasToken(v, token) {
			return true
		}
	}
	return false
}

var (
	// ErrBadContentLength reports a Content-Length that is not a decimal
	// count of bytes.
	ErrBadContentLength = errors.New("h1: invalid Content-Length")
	// ErrConflictingContentLength reports Content-Length values that differ.
	ErrConflictingContentLength = errors.New("h1: conflicting Content-Length values")
)

// ParseContentLength reads the header's values, which must all agree.
func ParseContentLength(values []string) (int64, error) {
	first := strings.TrimSpace(values[0])
	for _, v := range values[1:] {
		if strings.TrimSpace(v) != first {
			return 0, ErrConflictingContentLength
		}
	}
	if first == "" || first[0] < '0' || first[0] > '9' {
		return 0, ErrBadContentLength
	}
	n, err := strconv.ParseInt(first, 10, 64)
	if err != nil {
		return 0, ErrBadContentLength
	}
	return n, nil
}
