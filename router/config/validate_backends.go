package config

import (
	"net/url"
	"strings"
)

func (k *checker) backends(c *Config) {
	seen := map[string]int{}
	for i, b := range c.Backends {
		p := index("backends", i)
		switch {
		case b.Name == "":
			k.err(p+".name", "must not be empty")
		case strings.ContainsFunc(b.Name, isSpaceOrControl):
			k.err(p+".name", "must not contain whitespace or control characters")
		default:
			if j, dup := seen[b.Name]; dup {
				k.err(p+".name", "duplicate of backends[%d].name %q", j, b.Name)
			} else {
				seen[b.Name] = i
			}
		}
		if b.Type != BackendTypeOpenAI {
			k.err(p+".type", "must be openai, got %q", b.Type)
		}
		k.errIf(p+".url", backendURLProblem(b.URL))
		switch b.Role {
		case RoleUnified, RolePrefill, RoleDecode:
		default:
			k.err(p+".role", "must be unified, prefill or decode, got %q", b.Role)
		}
		switch b.ResponsesAPI {
		case "", ResponsesNative, ResponsesConverted:
		default:
			k.err(p+".responses_api", "must be empty, native or converted, got %q", b.ResponsesAPI)
		}
		for j, m := range b.Models {
			if strings.TrimSpace(m) == "" {
				k.err(index(p+".models", j), "must not be empty")
			}
		}
	}
}

// backendURLProblem accepts an absolute http(s) URL with a host; a base
// path is allowed (some frontends live under a prefix).
func backendURLProblem(s string) string {
	if s == "" {
		return "must not be empty"
	}
	u, err := url.Parse(s)
	if err != nil {
		return "is not a valid URL"
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "scheme must be http:// or https://"
	}
	if u.Hostname() == "" {
		return "must name a host"
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "must not have a query string or fragment"
	}
	return ""
}
