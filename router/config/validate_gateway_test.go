package config

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGatewayDefaults(t *testing.T) {
	c := parse(t, `
backends:
	- {name: a, url: "http://a:1"}
	- name: b
		url: "http://b:1"
		timeout: 30s
		health_check: {path: /ready, enabled: false}
		circuit_breaker: {failure_threshold: 2}
`)
	g := c.Gateway
	assert.Equal(t, int64(10<<20), g.MaxBodyBytes)
	assert.Equal(t, 2, g.Retries)
	assert.Equal(t, 600*time.Second, g.RequestTimeout.Std())
	assert.Equal(t, 60*time.Second, g.ReadTimeout.Std())
	assert.Equal(t, 60*time.Second, g.WriteTimeout.Std())
	assert.Equal(t, 30*time.Second, g.ShutdownGrace.Std())
	assert.Equal(t, 4096, g.MaxInFlight)
	assert.Empty(t, c.APIKeys)

	a := c.Backends[0]
	assert.Equal(t, 300*time.Second, a.Timeout.Std())
	assert.Equal(t, HealthCheck{Enabled: true, Path: "/health", Interval: dur(10 * time.Second), Timeout: dur(2 * time.Second),
		UnhealthyThreshold: 3, HealthyThreshold: 1}, a.HealthCheck)
	assert.Equal(t, CircuitBreaker{FailureThreshold: 5, OpenFor: dur(30 * time.Second)}, a.CircuitBreaker)

	// Keys given inside a block override only themselves.
	b := c.Backends[1]
	assert.Equal(t, 30*time.Second, b.Timeout.Std())
	assert.False(t, b.HealthCheck.Enabled)
	assert.Equal(t, "/ready", b.HealthCheck.Path)
	assert.Equal(t, 10*time.Second, b.HealthCheck.Interval.Std())
	assert.Equal(t, 2, b.CircuitBreaker.FailureThreshold)
	assert.Equal(t, 30*time.Second, b.CircuitBreaker.OpenFor.Std())

	errs, _ := c.Validate()
	assert.Empty(t, errs)
}

// An explicit zero is not the default: it is kept and refused.
func TestExplicitZeroIsNotDefault(t *testing.T) {
	c := parse(t, `
backends:
	- {name: a, url: "http://a:1", timeout: 0s, health_check: {unhealthy_threshold: 0}}
`)
	assert.Zero(t, c.Backends[0].Timeout)
	errs, _ := c.Validate()
	var paths []string
	for _, e := range errs {
		paths = append(paths, e.Path)
	}
	assert.Equal(t, []string{"backends[0].timeout", "backends[0].health_check.unhealthy_threshold"}, paths)
}

func TestAPIKeysExpandFromTheEnvironment(t *testing.T) {
	c, err := Parse([]byte(untab(`
api_keys:
	- key: ${TEAM_KEY}
		allowed_backends: [a]
backends:
	- {name: a, url: "http://a:1"}
`)), envOf(map[string]string{"TEAM_KEY": "k-0123456789abcdef"}))
	require.NoError(t, err)
	assert.Equal(t, "k-0123456789abcdef", c.APIKeys[0].Key)
	assert.Equal(t, Mask, c.Masked().APIKeys[0].Key)
	errs, _ := c.Validate()
	assert.Empty(t, errs)
}

func TestValidateGateway(t *testing.T) {
	const p = "gateway"
	g := func(f func(*Gateway)) func(*Config) { return func(c *Config) { f(&c.Gateway) } }
	runRules(t, []ruleCase{
		{"defaults", nil, wantOK, "", ""},
		{"body 1KiB", g(func(g *Gateway) { g.MaxBodyBytes = 1 << 10 }), wantOK, "", ""},
		{"body too small", g(func(g *Gateway) { g.MaxBodyBytes = 1000 }), wantErr, p + ".max_body_bytes", "between"},
		{"body too large", g(func(g *Gateway) { g.MaxBodyBytes = 2 << 30 }), wantErr, p + ".max_body_bytes", "1 GiB"},
		{"no retries", g(func(g *Gateway) { g.Retries = 0 }), wantOK, "", ""},
		{"negative retries", g(func(g *Gateway) { g.Retries = -1 }), wantErr, p + ".retries", "between 0 and 16"},
		{"many retries", g(func(g *Gateway) { g.Retries = 17 }), wantErr, p + ".retries", "between 0 and 16"},
		{"request timeout zero", g(func(g *Gateway) { g.RequestTimeout = 0 }), wantErr, p + ".request_timeout", "greater than 0"},
		{"read timeout zero", g(func(g *Gateway) { g.ReadTimeout = 0 }), wantErr, p + ".read_timeout", "greater than 0"},
		{"write timeout negative", g(func(g *Gateway) { g.WriteTimeout = -1 }), wantErr, p + ".write_timeout", "greater than 0"},
		{"grace zero", g(func(g *Gateway) { g.ShutdownGrace = 0 }), wantOK, "", ""},
		{"grace negative", g(func(g *Gateway) { g.ShutdownGrace = dur(-time.Second) }), wantErr, p + ".shutdown_grace", "negative"},
		{"in flight one", g(func(g *Gateway) { g.MaxInFlight = 1 }), wantOK, "", ""},
		{"in flight zero", g(func(g *Gateway) { g.MaxInFlight = 0 }), wantErr, p + ".max_in_flight", "between 1 and"},
		{"in flight huge", g(func(g *Gateway) { g.MaxInFlight = 1<<20 + 1 }), wantErr, p + ".max_in_flight", "between 1 and"},
		{"net/http client", g(func(g *Gateway) { g.UpstreamClient = UpstreamClientNetHTTP }), wantOK, "", ""},
		{"unknown client", g(func(g *Gateway) { g.UpstreamClient = "curl" }), wantErr, p + ".upstream_client", `"builtin" or "net/http"`},
	})
}

func TestValidateBackendTuning(t *testing.T) {
	const p = "backends[0]"
	b := func(f func(*Backend)) func(*Config) { return func(c *Config) { f(&c.Backends[0]) } }
	runRules(t, []ruleCase{
		{"timeout zero", b(func(b *Backend) { b.Timeout = 0 }), wantErr, p + ".timeout", "greater than 0"},
		{"timeout past request timeout", b(func(b *Backend) { b.Timeout = dur(time.Hour) }), wantWarn, p + ".timeout", "gateway.request_timeout"},
		{"health path with query", b(func(b *Backend) { b.HealthCheck.Path = "/health?deep=1" }), wantOK, "", ""},
		{"health path empty", b(func(b *Backend) { b.HealthCheck.Path = "" }), wantErr, p + ".health_check.path", "empty"},
		{"health path relative", b(func(b *Backend) { b.HealthCheck.Path = "health" }), wantErr, p + ".health_check.path", "absolute path"},
		{"health path host-relative", b(func(b *Backend) { b.HealthCheck.Path = "//evil/health" }), wantErr, p + ".health_check.path", "absolute path"},
		{"health path space", b(func(b *Backend) { b.HealthCheck.Path = "/he alth" }), wantErr, p + ".health_check.path", "whitespace"},
		{"health path fragment", b(func(b *Backend) { b.HealthCheck.Path = "/health#x" }), wantErr, p + ".health_check.path", "fragment"},
		{"health interval tiny", b(func(b *Backend) { b.HealthCheck.Interval = dur(time.Millisecond) }), wantErr, p + ".health_check.interval", "between 100ms and 1h"},
		{"health interval huge", b(func(b *Backend) { b.HealthCheck.Interval = dur(2 * time.Hour) }), wantErr, p + ".health_check.interval", "between 100ms and 1h"},
		{"health timeout zero", b(func(b *Backend) { b.HealthCheck.Timeout = 0 }), wantErr, p + ".health_check.timeout", "greater than 0"},
		{"health timeout over interval", b(func(b *Backend) { b.HealthCheck.Timeout = dur(11 * time.Second) }), wantErr, p + ".health_check.timeout", "must not exceed interval"},
		{"unhealthy threshold zero", b(func(b *Backend) { b.HealthCheck.UnhealthyThreshold = 0 }), wantErr, p + ".health_check.unhealthy_threshold", "between 1 and 100"},
		{"healthy threshold huge", b(func(b *Backend) { b.HealthCheck.HealthyThreshold = 101 }), wantErr, p + ".health_check.healthy_threshold", "between 1 and 100"},
		{"breaker threshold zero", b(func(b *Backend) { b.CircuitBreaker.FailureThreshold = 0 }), wantErr, p + ".circuit_breaker.failure_threshold", "between 1 and 100"},
		{"breaker open zero", b(func(b *Backend) { b.CircuitBreaker.OpenFor = 0 }), wantErr, p + ".circuit_breaker.open_for", "greater than 0"},
		{"health checks off still validated", b(func(b *Backend) { b.HealthCheck.Enabled = false; b.HealthCheck.Path = "" }), wantErr, p + ".health_check.path", "empty"},
	})
}

func TestValidateAPIKeys(t *testing.T) {
	const p = "api_keys"
	const good = "k-0123456789abcdef"
	keys := func(k ...APIKey) func(*Config) { return func(c *Config) { c.APIKeys = k } }
	runRules(t, []ruleCase{
		{"one key", keys(APIKey{Key: good}), wantOK, p + "[0].key", ""},
		{"allowed backend", keys(APIKey{Key: good, AllowedBackends: []string{"frontend"}}), wantOK, "", ""},
		{"empty key", keys(APIKey{}), wantErr, p + "[0].key", "empty"},
		{"blank key", keys(APIKey{Key: "   "}), wantErr, p + "[0].key", "only whitespace"},
		{"inner space", keys(APIKey{Key: "abc def ghi jkl mno"}), wantErr, p + "[0].key", "whitespace or control"},
		{"duplicate key", keys(APIKey{Key: good}, APIKey{Key: good}), wantErr, p + "[1].key", "same key as api_keys[0]"},
		{"short key", keys(APIKey{Key: "short"}), wantWarn, p + "[0].key", "easy to guess"},
		{"unknown backend", keys(APIKey{Key: good, AllowedBackends: []string{"nope"}}), wantErr, p + "[0].allowed_backends[0]", "backends[].name"},
		{"empty backend", keys(APIKey{Key: good, AllowedBackends: []string{""}}), wantErr, p + "[0].allowed_backends[0]", "empty"},
		{"duplicate backend", keys(APIKey{Key: good, AllowedBackends: []string{"frontend", "frontend"}}), wantErr, p + "[0].allowed_backends[1]", "duplicate"},
		{"open on loopback", nil, wantOK, p, "anyone"},
		{"open on every interface", func(c *Config) { c.Server.BindAddress = ":8080" }, wantWarn, p, "anyone who can reach it"},
		{"closed on every interface", func(c *Config) { c.Server.BindAddress = ":8080"; c.APIKeys = []APIKey{{Key: good}} }, wantOK, p, "anyone"},
	})
}

// A key never appears in a validation message, even when it is invalid.
func TestAPIKeyMessagesNeverRepeatTheKey(t *testing.T) {
	c := validBase()
	c.APIKeys = []APIKey{{Key: "sekrit value"}, {Key: "sekrit"}, {Key: "sekrit"}}
	errs, warns := c.Validate()
	require.NotEmpty(t, errs)
	for _, i := range append(errs, warns...) {
		assert.False(t, strings.Contains(i.Message, "sekrit"), i.String())
	}
}
