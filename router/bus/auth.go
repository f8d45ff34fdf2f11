package bus

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"

	"switchyard/router/bus/wire"
	"switchyard/router/config"
)

// identity is who a request authenticated as.
type identity struct {
	entry  *config.BusClient
	byCert bool
}

// revoked is a ring of removed credentials: "sha256:<hex>" token hashes
// and "id:<broker id>" certificate identities.
type revoked struct {
	keys [RevokedRing]string
	next int
}

func (r *revoked) add(k string) {
	if r.has(k) {
		return
	}
	r.keys[r.next] = k
	r.next = (r.next + 1) % RevokedRing
}

func (r *revoked) has(k string) bool {
	if k == "" {
		return false
	}
	for _, v := range r.keys {
		if v == k {
			return true
		}
	}
	return false
}

// tokenHash is the configured form of a bearer token.
func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// matchToken compares the token's hash with every entry's in constant
// time, never stopping early.
func matchToken(st *state, token string) *config.BusClient {
	h := []byte(tokenHash(token))
	var found *config.BusClient
	for i := range st.Brokers {
		e := &st.Brokers[i]
		if e.TokenHash == "" {
			continue
		}
		if subtle.ConstantTimeCompare(h, []byte(e.TokenHash)) == 1 {
			found = e
		}
	}
	return found
}

// certNames are the broker names a verified client certificate carries:
// its DNS SANs, lowercase, wildcards never matching.
func certNames(r *http.Request) []string {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.PeerCertificates) == 0 {
		return nil
	}
	var names []string
	for _, n := range r.TLS.PeerCertificates[0].DNSNames {
		if n == "" || strings.Contains(n, "*") || n != strings.ToLower(n) {
			continue
		}
		names = append(names, n)
	}
	return names
}

// authenticate resolves a request's credential. The token decides when
// both are sent; the certificate must then not name another broker.
func (l *Listener) authenticate(r *http.Request, cs *connState) (identity, int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.st
	names := certNames(r)
	if len(names) > 0 && cs.caGen != st.caGen {
		// The CA that verified this connection is no longer configured.
		names = nil
		if r.Header.Get("Authorization") == "" {
			return identity{}, http.StatusUnauthorized, wire.CodeCredentialRevoked
		}
	}
	if auth := r.Header.Get("Authorization"); auth != "" {
		token, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok || token == "" {
			return identity{}, http.StatusUnauthorized, wire.CodeUnauthenticated
		}
		e := matchToken(st, token)
		if e == nil {
			if l.revoked.has(tokenHash(token)) {
				return identity{}, http.StatusUnauthorized, wire.CodeCredentialRevoked
			}
			return identity{}, http.StatusUnauthorized, wire.CodeUnauthenticated
		}
		for _, n := range names {
			if o, ok := st.byID[n]; ok && o != e {
				return identity{}, http.StatusForbidden, wire.CodeForbidden
			}
		}
		return identity{entry: e}, 0, ""
	}
	var found *config.BusClient
	revokedName := false
	for _, n := range names {
		if e, ok := st.byID[n]; ok {
			if found != nil && found != e {
				// One certificate naming two brokers identifies neither.
				return identity{}, http.StatusForbidden, wire.CodeForbidden
			}
			found = e
		} else if l.revoked.has("id:" + n) {
			revokedName = true
		}
	}
	if found != nil {
		return identity{entry: found, byCert: true}, 0, ""
	}
	if revokedName {
		return identity{}, http.StatusUnauthorized, wire.CodeCredentialRevoked
	}
	return identity{}, http.StatusUnauthorized, wire.CodeUnauthenticated
}
