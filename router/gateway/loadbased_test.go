package gateway

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/load"
	"switchyard/router/metrics"
	"switchyard/router/picker"
)

// The real load-based picker over two namespaces, each behind its own
// shim pool: every request reaches the pool of the namespace its workers
// live in, a decode worker comes with its namespace's prefill worker, an
// aggregated one alone; a namespace whose only replica the key may not
// use is never offered.
func TestRealLoadPickerAcrossPools(t *testing.T) {
	prod, canary := newUpstream(t, "dyn-prod"), newUpstream(t, "dyn-canary")
	cfg := dynamoConfig(nil, backendFor(prod, clientModel), backendFor(canary, clientModel))
	cfg.Dynamo.Discovery.Etcd.Namespaces = []string{"prod", "canary"}
	cfg.Dynamo.Shim.Pools = []config.ShimPool{
		{Namespace: "prod", Backends: []string{"dyn-prod"}},
		{Namespace: "canary", Backends: []string{"dyn-canary"}},
	}
	cfg.APIKeys = []config.APIKey{{Key: "all-0123456789abcdef"}, {Key: "canary-0123456789abcdef", AllowedBackends: []string{"dyn-canary"}}}
	errs, _ := cfg.Validate()
	require.Empty(t, errs)

	const prodPrefill, prodDecode, canaryAgg uint64 = 101, 102, 201
	reg := discovery.NewRegistry()
	publish(reg,
		withDP(worker("prod", prodPrefill, discovery.RolePrefill, clientModel), 0),
		worker("prod", prodDecode, discovery.RoleDecode, clientModel),
		worker("canary", canaryAgg, discovery.RoleAggregated, clientModel),
	)
	store := load.NewStore(nil)
	store.SetLive(reg.Snapshot())
	var mu sync.Mutex
	selections := map[string]int{}
	lb := picker.NewLoad(store, func(role, reason string) {
		mu.Lock()
		selections[role+"/"+reason]++
		mu.Unlock()
	})
	m := metrics.New()
	gw := New(cfg, Options{Registry: reg, Pinner: newTestPinner(reg, lb), Metrics: m.Gateway, Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	f := &fixture{t: t, gw: gw, srv: srv, reg: reg, metrics: m}

	all := http.Header{"Authorization": {"Bearer all-0123456789abcdef"}}
	for range 6 {
		resp, body := f.post(pathChat, chatBody(clientModel, false), all)
		require.Equal(t, 200, resp.StatusCode, string(body))
	}
	require.NotEmpty(t, prod.requests())
	require.NotEmpty(t, canary.requests())
	for _, r := range prod.requests() {
		assert.Equal(t, map[string]string{
			"x-dynamo-worker-instance-id":  strconv.FormatUint(prodDecode, 10),
			"x-dynamo-prefill-instance-id": strconv.FormatUint(prodPrefill, 10),
			"x-dynamo-prefill-dp-rank":     "0",
		}, dynamoHeaders(r.Header))
	}
	for _, r := range canary.requests() {
		assert.Equal(t, map[string]string{"x-dynamo-worker-instance-id": strconv.FormatUint(canaryAgg, 10)}, dynamoHeaders(r.Header))
	}
	mu.Lock()
	assert.Equal(t, 6, selections["decode/"+picker.ReasonRoundRobin], "the picker counts its own selections: %v", selections)
	mu.Unlock()

	before := len(prod.requests())
	canaryKey := http.Header{"Authorization": {"Bearer canary-0123456789abcdef"}}
	for range 3 {
		resp, body := f.post(pathChat, chatBody(clientModel, true), canaryKey)
		require.Equal(t, 200, resp.StatusCode, string(body))
	}
	assert.Len(t, prod.requests(), before, "prod is not offered to a key without its replica")
}
