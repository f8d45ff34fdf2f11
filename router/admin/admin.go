// Package admin serves the operator API behind a bearer token.
package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
)

// Auth checks Authorization: Bearer <token> in constant time. The token can
// change on reload; an empty token disables the admin API (every request is
// refused) rather than leaving it open.
type Auth struct {
	digest atomic.Pointer[[32]byte]
}

// SetToken installs the token; "" disables access.
func (a *Auth) SetToken(token string) {
	if token == "" {
		a.digest.Store(nil)
		return
	}
	d := sha256.Sum256([]byte(token))
	a.digest.Store(&d)
}

// Wrap refuses requests without the current token with 401.
func (a *Auth) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := a.digest.Load()
		if want == nil {
			writeError(w, http.StatusUnauthorized, "unauthenticated", "admin API disabled: set admin.token")
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		// Compare digests so the comparison time depends on neither token's length.
		gd := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if !ok || subtle.ConstantTimeCompare(gd[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="switchyard-admin"`)
			writeError(w, http.StatusUnauthorized, "unauthenticated", "missing or invalid bearer token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError uses the OpenAI error shape, which every Switchyard API shares.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": msg, "type": http.StatusText(status), "code": code,
	}})
}
