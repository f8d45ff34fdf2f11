package config

import (
	"fmt"
	"strings"
)

// expandEnv replaces ${NAME} and ${NAME:-default} in s. As in a shell, the
// default applies when NAME is unset or empty; without a default an unset
// NAME is an error, while a set-but-empty one expands to "". A '$' not
// followed by '{' is literal, and substituted text is not expanded again,
// so a secret containing "${" passes through unchanged.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		rest := s[i+2:]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return "", fmt.Errorf("unterminated ${ (missing '}')")
		}
		name, def, hasDef := strings.Cut(rest[:end], ":-")
		if !isEnvName(name) {
			return "", fmt.Errorf("invalid variable name %q in ${...}", name)
		}
		val, ok := lookup(name)
		switch {
		case ok && (val != "" || !hasDef):
			b.WriteString(val)
		case hasDef:
			b.WriteString(def)
		default:
			return "", fmt.Errorf("environment variable %s is not set (write ${%s:-default} to allow that)", name, name)
		}
		s = rest[end+1:]
	}
}

// isEnvName reports whether s is a portable variable name.
func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
