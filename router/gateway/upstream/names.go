package upstream

import (
	"net/http"
	"strconv"
)

func init() {
	for code := range statusTexts {
		if t := http.StatusText(code); t != "" {
			statusTexts[code] = strconv.Itoa(code) + " " + t
		}
	}
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
