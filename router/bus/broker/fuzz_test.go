package broker

import (
	"bytes"
	"strings"
	"testing"

	"switchyard/router/bus/wire"
)

// FuzzRefusalCode: whatever the router's error body holds, the code read
// from it is "" or a short name without spaces or control characters
// (it is logged), and nothing past the body cap is read.
func FuzzRefusalCode(f *testing.F) {
	f.Add(wire.NewErrorBody(wire.CodeUnauthenticated, "no"))
	f.Add([]byte(`{"error":{"code":"a b"}}`))
	f.Add([]byte(`{"error":{"code":"` + strings.Repeat("x", 100) + `"}}`))
	f.Add([]byte(`{"error":`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		r := bytes.NewReader(append(body, make([]byte, errorBodyCap)...))
		code := refusalCode(r)
		if code != "" && !validName(code, 64) {
			t.Fatalf("code %q", code)
		}
		if read := len(body) + errorBodyCap - r.Len(); read > errorBodyCap {
			t.Fatalf("read %d bytes past the cap", read)
		}
	})
}
