package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/registrar"
	"switchyard/internal/etcdtest"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/gateway"
)

// readyConfig routes model "qwen" (mapped to the display name "Qwen/Qwen3")
// through one shim backend at shimURL, discovering from etcd at endpoint.
func readyConfig(endpoint, shimURL string) *config.Config {
	c := config.Default()
	c.Server.BindAddress = "127.0.0.1:0"
	c.Dynamo.Enabled = true
	c.Dynamo.Discovery.Etcd.Endpoints = []string{endpoint}
	c.Dynamo.Discovery.Etcd.WatchReconnectBackoff = config.Backoff{
		Initial: config.Duration(50 * time.Millisecond), Max: config.Duration(200 * time.Millisecond)}
	c.Dynamo.Shim.Backends = []string{"shim"}
	c.Dynamo.Shim.ModelMap = map[string]string{"qwen": "Qwen/Qwen3"}
	c.DisaggregatedServing.Enabled = true
	b := config.DefaultBackend()
	b.Name, b.URL, b.Models = "shim", shimURL, []string{"qwen"}
	b.HealthCheck.Interval = config.Duration(100 * time.Millisecond)
	b.HealthCheck.Timeout = config.Duration(100 * time.Millisecond)
	b.HealthCheck.UnhealthyThreshold = 1
	c.Backends = []config.Backend{b}
	return c
}

// readyState fetches /ready.
func readyState(t *testing.T, base string) (int, readiness) {
	code, b := get(t, base+"/ready", "")
	var r readiness
	require.NoError(t, json.Unmarshal(b, &r), string(b))
	return code, r
}

// failing names the checks that fail.
func failing(r readiness) []string {
	var out []string
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

// /ready against a real etcd and a real shim health route: ready once a
// decode worker of the served model is registered; not ready, naming the
// check, when the worker's lease is revoked, when the shim fails its
// probes, and when etcd stops.
func TestReadyFollowsFleetBackendsAndEtcd(t *testing.T) {
	etcd := etcdtest.Start(t)
	var shimDown atomic.Bool
	shim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if shimDown.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer shim.Close()
	srv, err := New(readyConfig(etcd.Endpoint(), shim.URL), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer srv.Close()
	base := "http://" + srv.Addr()

	// Connected, backend healthy, but no worker: not ready on workers alone.
	eventually(t, "discovery to connect", func() bool {
		_, r := readyState(t, base)
		return len(failing(r)) == 1 && failing(r)[0] == checkWorkers
	})
	code, r := readyState(t, base)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not_ready", r.Status)
	require.Contains(t, r.Checks[1].Detail, "Qwen/Qwen3")

	cli := etcd.Client(t)
	prefill := registrar.Worker{Namespace: "dynamo", Component: "prefill", WorkerType: "prefill", Model: "Qwen/Qwen3",
		BlockSize: 16, TotalKVBlocks: 64, MaxNumBatchedTokens: 512, MaxNumSeqs: 4, ContextLength: 1024, Transport: "127.0.0.1:9/x"}
	pre, err := registrar.Register(context.Background(), cli, prefill, 10, nil)
	require.NoError(t, err)
	defer pre.Kill() // etcd is stopped by then: a revoke would wait for it
	decode := prefill
	decode.Component, decode.WorkerType = "decode", "decode"
	reg, err := registrar.Register(context.Background(), cli, decode, 10, nil)
	require.NoError(t, err)
	eventually(t, "ready with a decode worker", func() bool {
		code, _ := readyState(t, base)
		return code == http.StatusOK
	})
	_, r = readyState(t, base)
	require.Equal(t, "ready", r.Status)
	require.Len(t, r.Checks, 3)

	// The decode worker's lease is revoked: a prefill worker alone serves nothing.
	require.NoError(t, reg.Deregister(context.Background()))
	eventually(t, "not ready without a decode worker", func() bool {
		_, r := readyState(t, base)
		return len(failing(r)) == 1 && failing(r)[0] == checkWorkers
	})
	reg, err = registrar.Register(context.Background(), cli, decode, 10, nil)
	require.NoError(t, err)
	defer reg.Kill()
	eventually(t, "ready again", func() bool { code, _ := readyState(t, base); return code == http.StatusOK })

	// The only backend fails its health probe.
	shimDown.Store(true)
	eventually(t, "not ready with the shim unhealthy", func() bool {
		_, r := readyState(t, base)
		return len(failing(r)) == 1 && failing(r)[0] == checkBackends
	})
	shimDown.Store(false)
	eventually(t, "ready with the shim back", func() bool { code, _ := readyState(t, base); return code == http.StatusOK })

	// etcd goes away: discovery is no longer connected.
	etcd.Stop()
	eventually(t, "not ready with etcd stopped", func() bool {
		code, r := readyState(t, base)
		return code == http.StatusServiceUnavailable && len(failing(r)) >= 1 && failing(r)[0] == checkDiscovery
	})
}

func TestReadinessRules(t *testing.T) {
	cfg := readyConfig("http://127.0.0.1:2379", "http://127.0.0.1:1")
	usable := []gateway.BackendState{{Name: "shim", Shim: true, Usable: true}}
	worker := func(ns, model string, role discovery.Role) *discovery.Worker {
		return &discovery.Worker{Namespace: ns, Model: model, Role: role}
	}
	snap := func(ws ...*discovery.Worker) *discovery.Snapshot {
		return &discovery.Snapshot{View: discovery.View{Workers: ws}}
	}
	cases := []struct {
		name     string
		cfg      func(*config.Config)
		conn     bool
		snap     *discovery.Snapshot
		backends []gateway.BackendState
		failing  []string
	}{
		{name: "ready", conn: true, snap: snap(worker("dynamo", "Qwen/Qwen3", discovery.RoleDecode)), backends: usable},
		{name: "aggregated serves", conn: true, snap: snap(worker("dynamo", "Qwen/Qwen3", discovery.RoleAggregated)), backends: usable},
		{name: "prefill alone", conn: true, snap: snap(worker("dynamo", "Qwen/Qwen3", discovery.RolePrefill)), backends: usable, failing: []string{checkWorkers}},
		{name: "unknown role", conn: true, snap: snap(worker("dynamo", "Qwen/Qwen3", discovery.RoleUnknown)), backends: usable, failing: []string{checkWorkers}},
		{name: "client id is not the display name", conn: true, snap: snap(worker("dynamo", "qwen", discovery.RoleDecode)), backends: usable, failing: []string{checkWorkers}},
		{name: "other namespace", conn: true, snap: snap(worker("other", "Qwen/Qwen3", discovery.RoleDecode)), backends: usable, failing: []string{checkWorkers}},
		{name: "disconnected", snap: snap(worker("dynamo", "Qwen/Qwen3", discovery.RoleDecode)), backends: usable, failing: []string{checkDiscovery}},
		{name: "no usable backend", conn: true, snap: snap(worker("dynamo", "Qwen/Qwen3", discovery.RoleDecode)),
			backends: []gateway.BackendState{{Name: "shim"}}, failing: []string{checkBackends}},
		{name: "no backend", conn: true, snap: snap(), cfg: func(c *config.Config) { c.Backends, c.Dynamo.Shim.Backends = nil, nil },
			failing: []string{checkWorkers, checkBackends}},
		{name: "no served model: any routable worker", conn: true, snap: snap(worker("dynamo", "x", discovery.RoleDecode)), backends: usable,
			cfg: func(c *config.Config) { c.Backends[0].Models = nil }},
		{name: "a disabled backend serves nothing", conn: true, snap: snap(), backends: usable,
			cfg: func(c *config.Config) { off := false; c.Backends[0].Enabled = &off }, failing: []string{checkWorkers}},
		{name: "dynamo disabled", snap: snap(), backends: usable, cfg: func(c *config.Config) { c.Dynamo.Enabled = false }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg.Clone()
			if tc.cfg != nil {
				tc.cfg(c)
			}
			r := readinessOf(c, tc.conn, tc.snap, tc.backends)
			require.Equal(t, tc.failing, failing(r), "%+v", r)
			require.Equal(t, len(tc.failing) == 0, r.ready())
		})
	}
}

func TestServedModels(t *testing.T) {
	c := readyConfig("http://127.0.0.1:2379", "http://127.0.0.1:1")
	b2 := config.DefaultBackend()
	b2.Name, b2.URL, b2.Models = "shim-b", "http://127.0.0.1:2", []string{"qwen", "llama"}
	c.Backends = append(c.Backends, b2)
	c.Dynamo.Shim.Backends = nil
	c.Dynamo.Discovery.Etcd.Namespaces = []string{"a", "b"}
	c.Dynamo.Shim.Pools = []config.ShimPool{{Namespace: "a", Backends: []string{"shim"}}, {Namespace: "b", Backends: []string{"shim-b", "absent"}}}
	require.Equal(t, []ServedModel{
		{Model: "Qwen/Qwen3", Namespaces: []string{"a", "b"}},
		{Model: "llama", Namespaces: []string{"b"}},
	}, ServedModels(c))
	require.Equal(t, "a, b, c, d, e, f, g, h and 2 more", nameSome([]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}))
}
