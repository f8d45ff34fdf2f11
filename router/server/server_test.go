package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"switchyard/fakefleet/registrar"
	"switchyard/router/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func embeddedConfig(token string) *config.Config {
	c := config.Default()
	c.Server.BindAddress = "127.0.0.1:0"
	c.Admin.Token = token
	c.Dynamo.Enabled = true
	c.Dynamo.Discovery.Etcd.Embedded.Enabled = true
	c.Dynamo.Discovery.Etcd.Embedded.Listen = "127.0.0.1:0"
	c.Dynamo.Discovery.Etcd.WatchReconnectBackoff = config.Backoff{
		Initial: config.Duration(50 * time.Millisecond), Max: config.Duration(time.Second)}
	c.Dynamo.Load.DirectAllowCIDRs = []string{"127.0.0.0/8"}
	return c
}

func get(t *testing.T, url, token string) (int, []byte) {
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func workers(t *testing.T, base, token string) []map[string]any {
	code, b := get(t, base+"/admin/dynamo/workers", token)
	require.Equal(t, 200, code, string(b))
	var body struct {
		Workers []map[string]any `json:"workers"`
	}
	require.NoError(t, json.Unmarshal(b, &body))
	return body.Workers
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		time.Sleep(20 * time.Millisecond)
	}
}

// A whole router with its embedded etcd: a worker registered under a real
// lease appears, and disappears when its lease lapses; reloads swap the
// admin token or are refused; Close leaves no goroutine behind.
func TestServerWithEmbeddedEtcd(t *testing.T) {
	srv, err := New(embeddedConfig("first"), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer srv.Close()
	base := "http://" + srv.Addr()

	code, body := get(t, base+"/health", "")
	require.Equal(t, 200, code)
	require.JSONEq(t, `{"status":"ok"}`, string(body))

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	reg, err := registrar.Register(context.Background(), cli, registrar.Worker{
		Namespace: "dynamo", Component: "prefill", WorkerType: "prefill", Model: "m", BlockSize: 16,
		TotalKVBlocks: 64, MaxNumBatchedTokens: 512, MaxNumSeqs: 4, ContextLength: 1024, Transport: "127.0.0.1:9/x",
	}, 2)
	require.NoError(t, err)
	eventually(t, "the worker", func() bool { return len(workers(t, base, "first")) == 1 })
	w := workers(t, base, "first")[0]
	require.Equal(t, "prefill", w["role"])
	require.Equal(t, float64(64), w["capacity"].(map[string]any)["total_kv_blocks"])

	// The worker dies: its lease lapses and the router drops it.
	reg.Kill()
	eventually(t, "the lapsed worker to leave", func() bool { return len(workers(t, base, "first")) == 0 })

	// An invalid reload is refused; a valid one swaps the token live.
	bad := embeddedConfig("first")
	bad.Dynamo.Load.MaxStaleness = config.Duration(time.Hour)
	require.Error(t, srv.Reload(bad))
	code, _ = get(t, base+"/admin/dynamo/workers", "first")
	require.Equal(t, 200, code)
	require.NoError(t, srv.Reload(embeddedConfig("second")))
	code, _ = get(t, base+"/admin/dynamo/workers", "first")
	require.Equal(t, 401, code)
	code, body = get(t, base+"/admin/config", "second")
	require.Equal(t, 200, code)
	require.Contains(t, string(body), `"token": "****"`, "the admin token is masked in the config readback")
	require.Contains(t, string(body), `"bind_address": "127.0.0.1:0"`)
	require.NotContains(t, string(body), "second")

	code, body = get(t, base+"/metrics", "")
	require.Equal(t, 200, code)
	require.Contains(t, string(body), "switchyard_dynamo_discovery_connected 1")
}

func TestInvalidConfigIsRefused(t *testing.T) {
	c := config.Default()
	c.Server.BindAddress = "nonsense"
	_, err := New(c, slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "server.bind_address")
}
