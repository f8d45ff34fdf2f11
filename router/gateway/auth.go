package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"switchyard/router/config"
)

// apiKey is a configured client key, held as a digest so comparisons take
// the same time whatever the lengths involved.
type apiKey struct {
	digest [sha256.Size]byte
	// allowed is nil when the key may use every backend.
	allowed map[string]bool
}

func newAPIKeys(keys []config.APIKey) []apiKey {
	out := make([]apiKey, len(keys))
	for i, k := range keys {
		out[i].digest = sha256.Sum256([]byte(k.Key))
		if len(k.AllowedBackends) > 0 {
			out[i].allowed = make(map[string]bool, len(k.AllowedBackends))
			for _, b := range k.AllowedBackends {
				out[i].allowed[b] = true
			}
		}
	}
	return out
}

// allows reports whether the key may use a backend. A nil key (no keys are
// configured) allows everything.
func (k *apiKey) allows(backend string) bool {
	return k == nil || k.allowed == nil || k.allowed[backend]
}

// authenticate finds the request's key. With no keys configured every
// request passes with a nil key; otherwise a missing or unknown bearer
// token fails.
func (st *state) authenticate(r *http.Request) (*apiKey, bool) {
	if len(st.keys) == 0 {
		return nil, true
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, false
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(token)))
	var found *apiKey
	// Every key is compared, so timing does not tell which one matched.
	for i := range st.keys {
		if subtle.ConstantTimeCompare(d[:], st.keys[i].digest[:]) == 1 {
			found = &st.keys[i]
		}
	}
	return found, found != nil
}

func writeUnauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard"`)
	writeError(w, http.StatusUnauthorized, codeInvalidAPIKey, "missing or invalid API key: send Authorization: Bearer <key>")
}
