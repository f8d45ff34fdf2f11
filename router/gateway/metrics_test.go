package gateway

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"

	"switchyard/router/metrics"
)

// Label values come from closed sets: unknown routes, results, phases and
// paths fold into a fixed value, odd status codes into their class, and
// backend names that are not configured create nothing.
func TestMetricLabelsAreClosed(t *testing.T) {
	g := metrics.New().Gateway
	g.SetBackends([]string{"a"})
	g.CountBackend("a", metrics.ResultOK)
	g.CountBackend("attacker-chosen", metrics.ResultOK)
	g.SetHealthy("attacker-chosen", false)
	g.CountBackend("a", "bogus")
	g.ObserveRequest("/v1/whatever", 418, time.Millisecond)
	g.ObserveRequest(metrics.RouteModels, 200, time.Millisecond)
	g.CountDisaggError("prefill")
	g.CountRoutingPath("teleport")

	assert.Equal(t, len(metrics.BackendResults), testutil.CollectAndCount(g.Backend))
	assert.Equal(t, 1.0, testutil.ToFloat64(g.Backend.WithLabelValues("a", metrics.ResultOK)))
	assert.Equal(t, 1.0, testutil.ToFloat64(g.Backend.WithLabelValues("a", metrics.ResultConnectError)))
	assert.Equal(t, 1, testutil.CollectAndCount(g.Healthy))
	assert.Equal(t, 1.0, testutil.ToFloat64(g.Requests.WithLabelValues(metrics.RouteOther, "4xx")))
	assert.Equal(t, 2, testutil.CollectAndCount(g.Requests))
	assert.Equal(t, len(metrics.Phases), testutil.CollectAndCount(g.DisaggErrors))
	assert.Equal(t, 1.0, testutil.ToFloat64(g.DisaggErrors.WithLabelValues(metrics.PhaseDecode)))
	assert.Equal(t, len(metrics.RoutingPaths), testutil.CollectAndCount(g.DisaggRequests))

	assert.Equal(t, "499", metrics.StatusLabel(499))
	assert.Equal(t, "5xx", metrics.StatusLabel(599))
	assert.Equal(t, "other", metrics.StatusLabel(42))

	g.SetBackends([]string{"b"})
	assert.Equal(t, len(metrics.BackendResults), testutil.CollectAndCount(g.Backend), "a's series went with it")
	assert.Equal(t, 1.0, testutil.ToFloat64(g.Healthy.WithLabelValues("b")))
}
