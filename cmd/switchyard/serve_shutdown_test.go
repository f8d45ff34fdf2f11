package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/publish"
	"switchyard/fakefleet/registrar"
	"switchyard/internal/etcdtest"
	"switchyard/internal/syncbuf"
)

// A normal shutdown of serve (its context cancelled, as SIGTERM does)
// with everything running, discovery, a kv_metrics subscription, backend
// probes, logs no WARN or ERROR; even when the fleet stops with it, its
// publisher closing first (as `switchyard demo` stops).
func TestServeShutdownLogsNoWarning(t *testing.T) {
	etcd := etcdtest.Start(t)
	shim := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer shim.Close()
	pub, err := publish.New("kv_metrics")
	require.NoError(t, err)
	defer pub.Close()
	reg, err := registrar.Register(context.Background(), etcd.Client(t), registrar.Worker{
		Namespace: "dynamo", Component: "decode", WorkerType: "decode", Model: "m", BlockSize: 16,
		TotalKVBlocks: 64, MaxNumBatchedTokens: 512, MaxNumSeqs: 4, ContextLength: 1024, Transport: "127.0.0.1:9/x",
		Channels: []registrar.Channel{{Topic: "kv_metrics", PublisherID: pub.ID(), Endpoint: pub.Endpoint()}},
	}, 10, nil)
	require.NoError(t, err)
	defer reg.Kill()

	addr := freeAddr(t)
	path := filepath.Join(t.TempDir(), "switchyard.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`server: {bind_address: %q}
admin: {token: shutdown-test-admin-token}
backends:
  - {name: shim, url: %q, models: [m], health_check: {interval: 100ms, timeout: 100ms}}
disaggregated_serving: {enabled: true}
dynamo:
  enabled: true
  discovery:
    etcd:
      endpoints: [%q]
  shim: {backends: [shim]}
  load: {direct_allow_cidrs: ["127.0.0.0/8"]}
`, addr, shim.URL, etcd.Endpoint())), 0o600))

	logs := &syncbuf.Buffer{}
	root := newRootCmd()
	root.SetArgs([]string{"serve", "--config", path})
	root.SetErr(logs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	admin := adminClient{base: "http://" + addr, token: "shutdown-test-admin-token"}
	waitFor(t, 30*time.Second, "a ready router with a connected subscription", func() bool {
		resp, err := http.Get(admin.base + "/ready")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		_, body := admin.workers(t)
		subs, _ := body["subscriptions"].([]any)
		return resp.StatusCode == http.StatusOK && len(subs) == 1 && subs[0].(map[string]any)["state"] == "connected"
	})

	pub.Close()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not return after its context ended; logs:\n%s", logs)
	}
	out := logs.String()
	require.Contains(t, out, "shutting down")
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("shutdown logged: %s", line)
		}
	}
}
