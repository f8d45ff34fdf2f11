package config

import (
	"net"
	"strings"
)

// Ceilings on the gateway settings, past which a value is surely a mistake.
const (
	minBodyBytes   = 1 << 10
	maxBodyBytes   = 1 << 30
	maxRetries     = 16
	maxAPIKeys     = 4096
	minKeyLength   = 16
	maxAllowedList = 1024
	maxInFlight    = 1 << 20
	// maxBufferedBodyBytes is 64 GiB.
	maxBufferedBodyBytes = 1 << 36
)

func (k *checker) gateway(c *Config) {
	const p = "gateway"
	g := c.Gateway
	if g.MaxBodyBytes < minBodyBytes || g.MaxBodyBytes > maxBodyBytes {
		k.err(p+".max_body_bytes", "must be between %d (1 KiB) and %d (1 GiB), got %d", minBodyBytes, maxBodyBytes, g.MaxBodyBytes)
	}
	if g.Retries < 0 || g.Retries > maxRetries {
		k.err(p+".retries", "must be between 0 and %d, got %d", maxRetries, g.Retries)
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{{"request_timeout", g.RequestTimeout}, {"read_timeout", g.ReadTimeout}, {"write_timeout", g.WriteTimeout}} {
		if d.v <= 0 {
			k.err(p+"."+d.name, "must be greater than 0")
		}
	}
	if g.ShutdownGrace < 0 {
		k.err(p+".shutdown_grace", "must not be negative (0 closes connections at once)")
	}
	if g.MaxInFlight < 1 || g.MaxInFlight > maxInFlight {
		k.err(p+".max_in_flight", "must be between 1 and %d, got %d", maxInFlight, g.MaxInFlight)
	}
	if g.MaxBufferedBodyBytes < minBodyBytes || g.MaxBufferedBodyBytes > maxBufferedBodyBytes {
		k.err(p+".max_buffered_body_bytes", "must be between %d (1 KiB) and %d (64 GiB), got %d",
			minBodyBytes, int64(maxBufferedBodyBytes), g.MaxBufferedBodyBytes)
	}
	if g.UpstreamClient != UpstreamClientBuiltin && g.UpstreamClient != UpstreamClientNetHTTP {
		k.err(p+".upstream_client", "must be %q or %q, got %q", UpstreamClientBuiltin, UpstreamClientNetHTTP, g.UpstreamClient)
	}
	if g.Server != ServerBuiltin && g.Server != ServerNetHTTP {
		k.err(p+".server", "must be %q or %q, got %q", ServerBuiltin, ServerNetHTTP, g.Server)
	}
}

// apiKeys checks the client credentials. Messages never repeat a key.
func (k *checker) apiKeys(c *Config) {
	const p = "api_keys"
	if len(c.APIKeys) > maxAPIKeys {
		k.err(p, "at most %d entries, got %d", maxAPIKeys, len(c.APIKeys))
	}
	names := make(map[string]bool, len(c.Backends))
	for _, b := range c.Backends {
		names[b.Name] = true
	}
	if len(c.APIKeys) == 0 && len(c.Backends) > 0 {
		if host, _, err := net.SplitHostPort(c.Server.BindAddress); err == nil && !isLoopbackHost(host) {
			k.warn(p, "empty while server.bind_address (%s) accepts non-local clients: anyone who can reach it may use every backend", c.Server.BindAddress)
		}
	}
	seen := map[string]int{}
	for i, key := range c.APIKeys {
		q := index(p, i)
		switch {
		case key.Key == "":
			k.err(q+".key", "must not be empty")
		case strings.TrimSpace(key.Key) == "":
			k.err(q+".key", "must not be only whitespace (an unset ${VAR:-} default?)")
		case strings.ContainsFunc(key.Key, isSpaceOrControl):
			k.err(q+".key", "must not contain whitespace or control characters; a bearer token cannot carry them")
		default:
			if j, dup := seen[key.Key]; dup {
				k.err(q+".key", "same key as %s", index(p, j))
			} else {
				seen[key.Key] = i
			}
			if len(key.Key) < minKeyLength {
				k.warn(q+".key", "shorter than %d characters: easy to guess", minKeyLength)
			}
		}
		k.uniqueList(q+".allowed_backends", key.AllowedBackends, maxAllowedList, func(s string) string {
			if s == "" {
				return "must not be empty"
			}
			if !names[s] {
				return "names no configured backend (backends[].name)"
			}
			return ""
		})
	}
}
