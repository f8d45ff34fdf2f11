package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/internal/etcdtest"
	"switchyard/internal/syncbuf"
)

// The seed's own Endpoint and Model records (instance 7465265302745285).
const (
	seedEndpointKey = "v1/instances/dynamo/prefill/generate/1a859e868630c5"
	seedModelKey    = "v1/mdc/dynamo/prefill/generate/1a859e868630c5"
	seedEndpoint    = `{"type":"Endpoint","namespace":"dynamo","component":"prefill","endpoint":"generate","instance_id":7465265302745285,"transport":{"tcp":"10.0.0.4:31000/1a7f2b/dynamo/prefill/generate"},"device_type":"cuda","request_plane_codec":"msgpack"}`
	seedModel       = `{"type":"Model","namespace":"dynamo","component":"prefill","endpoint":"generate","instance_id":7465265302745285,"card_json":{"display_name":"Qwen/Qwen3-32B","worker_type":"Prefill","kv_cache_block_size":64,"runtime_config":{"total_kv_blocks":12000,"max_num_batched_tokens":8192,"max_num_seqs":256,"context_length":32768,"data_parallel_start_rank":0,"data_parallel_size":1,"disaggregated_endpoint":"dynamo/decode/generate"}}}`
)

// buildBinary compiles the real switchyard binary once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "switchyard")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

type adminClient struct {
	base, token string
}

func (a adminClient) workers(t *testing.T) (int, map[string]any) {
	req, _ := http.NewRequest("GET", a.base+"/admin/dynamo/workers", nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

func workerCount(body map[string]any) int {
	ws, _ := body["workers"].([]any)
	return len(ws)
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < within {
		if cond() {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", within, what)
	return 0
}

func writeConfig(t *testing.T, path, addr, token, etcd, namespace string) {
	cfg := fmt.Sprintf(`server:
  bind_address: %q
admin:
  token: "${SWITCHYARD_TEST_TOKEN}"
dynamo:
  enabled: true
  discovery:
    etcd:
      endpoints: [%q]
      namespace: %q
      watch_reconnect_backoff: {initial: "100ms", max: "1s"}
  load:
    direct_allow_cidrs: ["127.0.0.0/8"]
`, addr, etcd, namespace)
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(cfg), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// TestServeAgainstEtcd runs the built binary against a real etcd holding the
// seed's records: the worker is listed in the seed's shape, leaves within a
// second of its key's deletion, and a config reload moves discovery to
// another namespace while an invalid file is refused.
func TestServeAgainstEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	ctx := context.Background()
	_, err := cli.Put(ctx, seedEndpointKey, seedEndpoint)
	require.NoError(t, err)
	_, err = cli.Put(ctx, seedModelKey, seedModel)
	require.NoError(t, err)

	bin := buildBinary(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "switchyard.yaml")
	addr := freeAddr(t)
	writeConfig(t, cfgPath, addr, "tok", etcd.Endpoint(), "dynamo")

	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--log-format", "json")
	cmd.Env = append(os.Environ(), "SWITCHYARD_TEST_TOKEN=tok")
	logs := &syncbuf.Buffer{}
	cmd.Stderr = logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("serve did not stop on SIGINT; logs:\n%s", logs)
		}
	})
	admin := adminClient{base: "http://" + addr, token: "tok"}

	var body map[string]any
	waitFor(t, 20*time.Second, "the seed worker", func() bool {
		_, body = admin.workers(t)
		return workerCount(body) == 1 && body["connected"] == true
	})
	w := body["workers"].([]any)[0].(map[string]any)
	require.Equal(t, "1a859e868630c5", w["instance_id"])
	require.Equal(t, "7465265302745285", w["worker_id"])
	require.Equal(t, "prefill", w["role"])
	require.Equal(t, "Qwen/Qwen3-32B", w["model"])
	require.Equal(t, float64(64), w["block_size"])
	require.Equal(t, float64(12000), w["capacity"].(map[string]any)["total_kv_blocks"])
	require.Equal(t, "dynamo/decode/generate", w["disaggregated_endpoint"])
	for _, f := range []string{"namespace", "component", "endpoint", "dp_start_rank", "dp_size", "first_seen", "last_updated"} {
		require.Contains(t, w, f)
	}
	require.NotContains(t, fmt.Sprint(body), "10.0.0.4", "transport addresses are never exported")

	// 401 without the token; /health and /metrics are open.
	status, _ := adminClient{base: admin.base, token: "wrong"}.workers(t)
	require.Equal(t, 401, status)
	resp, err := http.Get(admin.base + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(metrics), "switchyard_dynamo_discovery_connected 1")
	require.Contains(t, string(metrics), `switchyard_dynamo_discovery_events_total{kind="resync"}`)
	require.Contains(t, string(metrics), `switchyard_dynamo_workers{role="prefill"} 1`)

	// Deleting the key drops the worker within one second.
	_, err = cli.Delete(ctx, seedEndpointKey)
	require.NoError(t, err)
	took := waitFor(t, time.Second, "the worker to leave", func() bool {
		_, body = admin.workers(t)
		return body != nil && workerCount(body) == 0
	})
	t.Logf("worker left %v after its key was deleted", took)

	// Reload: an invalid file is refused and the running config kept...
	require.NoError(t, os.WriteFile(cfgPath, []byte("dynamo: {enabled: true, discovery: {etcd: {endpoints: ['user:pw@h:1']}}}\n"), 0o600))
	waitFor(t, 10*time.Second, "the rejected reload to be logged", func() bool {
		return strings.Contains(logs.String(), "reload rejected")
	})
	status, _ = admin.workers(t)
	require.Equal(t, 200, status, "the running admin token still works")

	// ...and a valid one moving to another namespace replaces the watcher.
	_, err = cli.Put(ctx, "v1/instances/canary/decode/generate/2a", `{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":42}`)
	require.NoError(t, err)
	writeConfig(t, cfgPath, addr, "tok", etcd.Endpoint(), "canary")
	waitFor(t, 10*time.Second, "the canary worker", func() bool {
		_, body = admin.workers(t)
		return workerCount(body) == 1 && body["namespace"] == "canary"
	})
	require.Equal(t, "2a", body["workers"].([]any)[0].(map[string]any)["instance_id"])
	resp, err = http.Get(admin.base + "/metrics")
	require.NoError(t, err)
	metrics, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(metrics), `switchyard_dynamo_discovery_events_total{kind="restart"} 1`)
}
