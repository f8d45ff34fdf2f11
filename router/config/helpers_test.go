package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// noEnv resolves no variables.
func noEnv(string) (string, bool) { return "", false }

// envOf resolves variables from a map.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// parse decodes YAML text written with tabs for readability in tests.
func parse(t *testing.T, doc string) *Config {
	t.Helper()
	c, err := Parse([]byte(untab(doc)), noEnv)
	require.NoError(t, err)
	return c
}

// parseErrors returns the decoding problems of doc, which must fail.
func parseErrors(t *testing.T, doc string) []string {
	t.Helper()
	_, err := Parse([]byte(untab(doc)), noEnv)
	require.Error(t, err)
	pe, ok := err.(*ParseError)
	require.True(t, ok, "want *ParseError, got %T", err)
	out := make([]string, len(pe.Errors))
	for i, fe := range pe.Errors {
		out[i] = fe.Error()
	}
	return out
}

// untab turns leading tabs into two spaces each, so YAML in Go raw
// strings can be indented with gofmt's tabs.
func untab(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		n := len(l) - len(strings.TrimLeft(l, "\t"))
		lines[i] = strings.Repeat("  ", n) + l[n:]
	}
	return strings.Join(lines, "\n")
}

func ptr[T any](v T) *T { return &v }

// with returns v after f has edited it, for one-expression fixtures.
func with[T any](v T, f func(*T)) T {
	f(&v)
	return v
}
