package config

import (
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
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
		k.globalPrompts(p+".global_prompts", b.GlobalPrompts)
		k.backendTimeouts(p, b, c.Gateway.RequestTimeout)
	}
}

// Bounds on backends[].global_prompts: each is sent with every chat body,
// so they stay small.
const (
	MaxGlobalPrompts     = 16
	MaxGlobalPromptBytes = 64 << 10
)

func (k *checker) globalPrompts(p string, prompts []string) {
	if len(prompts) > MaxGlobalPrompts {
		k.err(p, "at most %d prompts, got %d", MaxGlobalPrompts, len(prompts))
		return
	}
	for i, s := range prompts {
		switch {
		case strings.TrimSpace(s) == "":
			k.err(index(p, i), "must not be empty or only whitespace (an unset ${VAR:-} default?)")
		case len(s) > MaxGlobalPromptBytes:
			k.err(index(p, i), "must be at most %d bytes, got %d", MaxGlobalPromptBytes, len(s))
		case !utf8.ValidString(s):
			k.err(index(p, i), "must be valid UTF-8")
		}
	}
}

// Bounds on backend tuning: beyond them a value is surely a typo (a probe
// every 2h, a breaker that needs a thousand failures).
const (
	minProbeInterval = 100 * time.Millisecond
	maxProbeInterval = time.Hour
	maxThreshold     = 100
)

func (k *checker) backendTimeouts(p string, b Backend, requestTimeout Duration) {
	if b.Timeout <= 0 {
		k.err(p+".timeout", "must be greater than 0")
	} else if requestTimeout > 0 && b.Timeout > requestTimeout {
		k.warn(p+".timeout", "%s is longer than gateway.request_timeout (%s), which cuts requests off first", b.Timeout, requestTimeout)
	}
	h, q := b.HealthCheck, p+".health_check"
	k.errIf(q+".path", healthPathProblem(h.Path))
	if h.Interval < Duration(minProbeInterval) || h.Interval > Duration(maxProbeInterval) {
		k.err(q+".interval", "must be between %s and %s, got %s", Duration(minProbeInterval), Duration(maxProbeInterval), h.Interval)
	}
	switch {
	case h.Timeout <= 0:
		k.err(q+".timeout", "must be greater than 0")
	case h.Timeout > h.Interval:
		// Probes run one at a time, so a longer timeout stretches the interval.
		k.err(q+".timeout", "must not exceed interval (%s), got %s", h.Interval, h.Timeout)
	}
	k.threshold(q+".unhealthy_threshold", h.UnhealthyThreshold)
	k.threshold(q+".healthy_threshold", h.HealthyThreshold)
	cb, q := b.CircuitBreaker, p+".circuit_breaker"
	k.threshold(q+".failure_threshold", cb.FailureThreshold)
	if cb.OpenFor <= 0 {
		k.err(q+".open_for", "must be greater than 0")
	}
}

func (k *checker) threshold(path string, n int) {
	if n < 1 || n > maxThreshold {
		k.err(path, "must be between 1 and %d, got %d", maxThreshold, n)
	}
}

// healthPathProblem accepts an absolute path, optionally with a query.
func healthPathProblem(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case !strings.HasPrefix(s, "/") || strings.HasPrefix(s, "//"):
		return "must be an absolute path such as /health"
	case strings.ContainsFunc(s, isSpaceOrControl):
		return "must not contain whitespace or control characters"
	case strings.Contains(s, "#"):
		return "must not have a fragment"
	}
	return ""
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
	if u.User != nil {
		// Backend URLs appear in logs, config readbacks and the admin API.
		return "must not carry credentials (user:pass@): backend URLs are shown in logs and readbacks"
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "must not have a query string or fragment"
	}
	return ""
}
