package gateway

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/metrics"
)

// A reload takes effect on the next request. Backends whose URL, probe and
// breaker settings are unchanged keep their breaker and health state;
// removed backends lose their metric series.
func TestReload(t *testing.T) {
	a, b, shim := newUpstream(t, "a"), newUpstream(t, "b"), newUpstream(t, "dyn-a")
	a.setRespond(respondStatus(500, "down"))
	ba := backendFor(a, plainModel)
	ba.HealthCheck.Enabled = false
	ba.CircuitBreaker.FailureThreshold = 1
	clk := newManualClock()
	cfg := dynamoConfig(nil, ba, backendFor(b, "other-model"))
	f := newFixture(t, cfg, []*discovery.Worker{worker("dynamo", aggID, discovery.RoleAggregated, dynamoModel)},
		func(o *fixtureOptions) { o.clock = clk })

	resp, _ := f.post(pathChat, chatBody(plainModel, false), nil)
	require.Equal(t, 500, resp.StatusCode)
	resp, _ = f.post(pathChat, chatBody(plainModel, false), nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "a's breaker is open")

	// b now serves plainModel too, and a shim pool appears with a model_map.
	next := cfg.Clone()
	next.Backends[1].Models = []string{plainModel}
	next.Backends = append(next.Backends, backendFor(shim, clientModel))
	next.Dynamo.Shim.Backends = []string{"dyn-a"}
	next.Dynamo.Shim.ModelMap = map[string]string{clientModel: dynamoModel}
	errs, _ := next.Validate()
	require.Empty(t, errs)
	f.gw.Reload(next)

	resp, body := f.post(pathChat, chatBody(plainModel, false), nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	assert.Contains(t, string(body), "hello from b", "a kept its open breaker across the reload")
	resp, body = f.post(pathChat, chatBody(clientModel, false), nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	assert.Equal(t, strconv.FormatUint(aggID, 10), shim.requests()[0].Header.Get(hdrWorkerID), "pinned through the new pool")

	// Changing a's breaker settings gives it a fresh runtime (closed).
	third := next.Clone()
	third.Backends[0].CircuitBreaker.OpenFor = config.Duration(time.Minute)
	third.Backends = third.Backends[:1] // b and the shim go
	third.Dynamo.Shim = config.Shim{}
	f.gw.Reload(third)
	a.setRespond(nil)
	resp, body = f.post(pathChat, chatBody(plainModel, false), nil)
	require.Equal(t, 200, resp.StatusCode, string(body))
	assert.Contains(t, string(body), "hello from a")

	assert.Equal(t, 1, testutil.CollectAndCount(f.metrics.Gateway.Healthy), "only configured backends have series")
	assert.Equal(t, len(metrics.BackendResults), testutil.CollectAndCount(f.metrics.Gateway.Backend))
}
