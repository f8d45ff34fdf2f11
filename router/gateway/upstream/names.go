package upstream

import (
	"net/http"
	"strconv"
)

// commonKeys are header names answers usually carry, so their canonical
// form is not allocated anew per answer.
var commonKeys = map[string]string{}

func init() {
	for _, k := range []string{
		"Content-Type", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Date", "Server",
		"Cache-Control", "Vary", "X-Request-Id", "Access-Control-Allow-Origin", "Access-Control-Allow-Credentials",
		"Access-Control-Expose-Headers", "Retry-After", "Content-Encoding", "X-Accel-Buffering", "Trailer",
	} {
		commonKeys[k] = k
	}
	for code := range statusTexts {
		if t := http.StatusText(code); t != "" {
			statusTexts[code] = strconv.Itoa(code) + " " + t
		}
	}
}

// canonicalKey is the canonical form of a valid header name (as
// textproto.CanonicalMIMEHeaderKey), rewriting b in place.
func canonicalKey(b []byte) string {
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

// statusTexts holds "200 OK" and the like, so the usual status lines cost
// no allocation.
var statusTexts [600]string

// statusText is the Status field of an answer: code and reason.
func statusText(code int, reason []byte) string {
	if code < len(statusTexts) && statusTexts[code] != "" && string(reason) == http.StatusText(code) {
		return statusTexts[code]
	}
	return strconv.Itoa(code) + " " + string(reason)
}
