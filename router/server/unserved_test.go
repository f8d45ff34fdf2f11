package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/registrar"
	"switchyard/internal/syncbuf"
	"switchyard/router/config"
	"switchyard/router/discovery"
)

// A live router with Dynamo on and no shim backend: the discovered
// model is logged and counted, once.
func TestDiscoveredModelWithoutShimIsWarned(t *testing.T) {
	logs := &syncbuf.Buffer{}
	srv, err := New(embeddedConfig("admin-token-0123456789"), slog.New(slog.NewTextHandler(logs, nil)))
	require.NoError(t, err)
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	for _, role := range []string{"prefill", "decode"} {
		reg, err := registrar.Register(context.Background(), cli, registrar.Worker{
			Namespace: "dynamo", Component: role, WorkerType: role, Model: "m", BlockSize: 16,
			TotalKVBlocks: 64, MaxNumBatchedTokens: 512, MaxNumSeqs: 4, ContextLength: 1024, Transport: "127.0.0.1:9/x",
		}, 5, nil)
		require.NoError(t, err)
		defer reg.Kill()
	}
	eventually(t, "the unserved model to be counted", func() bool { return testutil.ToFloat64(srv.unserved.count) == 1 })
	require.Equal(t, 1, strings.Count(logs.String(), "has no shim backend"))
	require.Contains(t, logs.String(), "model=m")
}

func TestUnservedModelsOncePerNamespaceAndModel(t *testing.T) {
	cfg := config.Default()
	cfg.Dynamo.Enabled, cfg.DisaggregatedServing.Enabled = true, true
	cfg.Dynamo.Discovery.Etcd.Namespaces = []string{"prod", "canary"}
	b := config.DefaultBackend()
	b.Name = "frontend"
	cfg.Backends = []config.Backend{b}
	cfg.Dynamo.Shim.Pools = []config.ShimPool{{Namespace: "prod", Backends: []string{"frontend"}}}

	worker := func(ns, model string) *discovery.Worker { return &discovery.Worker{Namespace: ns, Model: model} }
	snap := &discovery.Snapshot{View: discovery.View{Workers: []*discovery.Worker{
		worker("prod", "a"), worker("canary", "a"), worker("canary", "a"), worker("canary", "b"), worker("canary", ""),
	}}}
	u := newUnservedModels(prometheus.NewRegistry())
	var logged []string
	log := func(ns, model string) { logged = append(logged, ns+"/"+model) }
	u.check(cfg, snap, log)
	u.check(cfg, snap, log)
	require.Equal(t, []string{"canary/a", "canary/b"}, logged, "prod has a pool; each pair once")
	require.Equal(t, 2.0, testutil.ToFloat64(u.count))

	// Bounded: fleet-authored model names cannot grow the set forever.
	many := &discovery.Snapshot{}
	for i := range maxUnservedWarnings + 10 {
		many.Workers = append(many.Workers, worker("canary", fmt.Sprint("m", i)))
	}
	u.check(cfg, many, func(string, string) {})
	require.Len(t, u.warned, maxUnservedWarnings)
}
