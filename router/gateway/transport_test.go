package gateway

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/config"
)

// The builtin client serves http:// backends by default; net/http's,
// which adds its own User-Agent to a request that has none, takes over
// on gateway.upstream_client: net/http, and back again, live.
func TestUpstreamClientFollowsTheConfiguration(t *testing.T) {
	u := newUpstream(t, "a")
	cfg := dynamoConfig(nil, backendFor(u, plainModel))
	f := newFixture(t, cfg, nil)
	noAgent := http.Header{"User-Agent": {""}}
	userAgent := func() string {
		got := u.requests()
		return got[len(got)-1].Header.Get("User-Agent")
	}

	for _, stream := range []bool{false, true} {
		resp, body := f.post(pathChat, chatBody(plainModel, stream), noAgent)
		require.Equal(t, 200, resp.StatusCode, string(body))
		assert.Contains(t, string(body), `"finish_reason":"stop"`)
		assert.Empty(t, userAgent(), "builtin client")
	}

	next := cfg.Clone()
	next.Gateway.UpstreamClient = config.UpstreamClientNetHTTP
	f.gw.Reload(next)
	resp, body := f.post(pathChat, chatBody(plainModel, false), noAgent)
	require.Equal(t, 200, resp.StatusCode, string(body))
	assert.Equal(t, "Go-http-client/1.1", userAgent(), "net/http's client")

	f.gw.Reload(cfg)
	resp, body = f.post(pathChat, chatBody(plainModel, true), noAgent)
	require.Equal(t, 200, resp.StatusCode, string(body))
	assert.Empty(t, userAgent())
}
