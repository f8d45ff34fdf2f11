package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/registrar"
	"switchyard/internal/syncbuf"
	"switchyard/router/config"
)

// reloadFileConfig is a router file with an embedded etcd, an admin token
// and one unified backend serving model m.
func reloadFileConfig(token, backendURL string) string {
	return fmt.Sprintf(`server: {bind_address: "127.0.0.1:0"}
admin: {token: %q}
backends:
  - {name: upstream, url: %q, models: [m]}
dynamo:
  enabled: true
  discovery:
    etcd:
      embedded: {enabled: true, listen: "127.0.0.1:0"}
      watch_reconnect_backoff: {initial: 50ms, max: 1s}
  load:
    direct_allow_cidrs: ["127.0.0.0/8"]
`, token, backendURL)
}

// upstream is a real OpenAI-shaped backend answering every chat.
func upstream(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/health" {
			_, _ = w.Write([]byte(`{}`))
			return
		}
		_, _ = w.Write([]byte(`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func chatStatus(t *testing.T, base string) int {
	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// A server watching its real file: a legitimate edit applies; truncating
// the file is refused, and requests, discovery and the admin API go on
// under the last good configuration.
func TestWatchedFileTruncationIsRefused(t *testing.T) {
	up := upstream(t)
	path := filepath.Join(t.TempDir(), "router.yaml")
	require.NoError(t, os.WriteFile(path, []byte(reloadFileConfig("first-admin-token-0001", up.URL)), 0o600))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	logs := &syncbuf.Buffer{}
	srv, err := New(cfg, slog.New(slog.NewTextHandler(logs, nil)))
	require.NoError(t, err)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan error, 1)
	go func() { watched <- srv.WatchConfigFile(ctx, path) }()
	defer func() { cancel(); require.NoError(t, <-watched) }()
	base := "http://" + srv.Addr()
	const token = "second-admin-token-0002"

	// The watcher may not be looking yet: rewrite (with a changing
	// comment) until the new token is live, less often than the watcher's
	// debounce so that the writes can settle.
	n, wrote := 0, time.Time{}
	eventually(t, "the edited admin token to apply", func() bool {
		if time.Since(wrote) > 4*configFileDebounce {
			n++
			body := reloadFileConfig(token, up.URL) + fmt.Sprintf("# edit %d\n", n)
			require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
			wrote = time.Now()
		}
		code, _ := get(t, base+"/admin/config", token)
		return code == http.StatusOK
	})
	require.Equal(t, http.StatusOK, chatStatus(t, base))
	// The token is live as Reload installs it; the reload is counted when
	// ReloadFile returns, a moment later.
	eventually(t, "the applied reload to be counted", func() bool {
		return testutil.ToFloat64(srv.reloads.WithLabelValues(reloadApplied)) >= 1
	})
	applied := testutil.ToFloat64(srv.reloads.WithLabelValues(reloadApplied))

	require.NoError(t, os.WriteFile(path, nil, 0o600)) // `: > router.yaml`
	eventually(t, "the truncated file to be refused", func() bool {
		return testutil.ToFloat64(srv.reloads.WithLabelValues(reloadRefused)) == 1
	})
	require.Contains(t, logs.String(), "config reload refused")
	require.Contains(t, logs.String(), "the file is empty")
	require.Equal(t, applied, testutil.ToFloat64(srv.reloads.WithLabelValues(reloadApplied)))

	require.Equal(t, http.StatusOK, chatStatus(t, base), "requests are still served")
	code, _ := get(t, base+"/admin/config", token)
	require.Equal(t, http.StatusOK, code, "the admin API is still on")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	reg, err := registrar.Register(context.Background(), cli, registrar.Worker{
		Namespace: "dynamo", Component: "decode", WorkerType: "decode", Model: "m", BlockSize: 16,
		TotalKVBlocks: 64, MaxNumBatchedTokens: 512, MaxNumSeqs: 4, ContextLength: 1024, Transport: "127.0.0.1:9/x",
	}, 5, nil)
	require.NoError(t, err)
	defer reg.Kill()
	eventually(t, "a worker registered after the truncation to be discovered", func() bool {
		ws := workers(t, base, token)
		return len(ws) == 1 && ws[0]["model"] == "m"
	})
	_, m := get(t, base+"/metrics", "")
	require.Contains(t, string(m), `switchyard_config_reloads_total{result="refused"} 1`)
}

// Files that parse and validate but would switch a serving router off
// are refused with their reason; an invalid one is rejected; each is
// counted and leaves the running configuration in place.
func TestReloadFileRefusesSwitchingEverythingOff(t *testing.T) {
	up := upstream(t)
	const token = "admin-token-0123456789"
	good := reloadFileConfig(token, up.URL)
	cfg, err := config.Parse([]byte(good), nil)
	require.NoError(t, err)
	logs := &syncbuf.Buffer{}
	srv, err := New(cfg, slog.New(slog.NewTextHandler(logs, nil)))
	require.NoError(t, err)
	defer srv.Close()
	base := "http://" + srv.Addr()

	for _, tc := range []struct {
		name, content, result, reason string
	}{
		{"comments only", "# nothing here\n\n", reloadRefused, "the file is empty"},
		{"no backends", strings.Replace(good, "backends:\n  - {name: upstream, url: \""+up.URL+"\", models: [m]}\n", "", 1), reloadRefused, "removes every backend"},
		{"dynamo off", strings.Replace(good, "enabled: true\n  discovery", "enabled: false\n  discovery", 1), reloadRefused, "disables Dynamo"},
		{"admin off", strings.Replace(good, token, "", 1), reloadRefused, "admin API off"},
		{"invalid", good + "unknown_key: 1\n", reloadRejected, "unknown field"},
		{"invalid and switching off", "gateway: {retries: 99}\n", reloadRejected, "gateway.retries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NotEqual(t, good, tc.content)
			before := testutil.ToFloat64(srv.reloads.WithLabelValues(tc.result))
			require.Equal(t, tc.result, srv.ReloadFile("router.yaml", []byte(tc.content)))
			require.Equal(t, before+1, testutil.ToFloat64(srv.reloads.WithLabelValues(tc.result)))
			require.Contains(t, logs.String(), tc.reason)
			require.Same(t, cfg, srv.cfg.Load(), "the last good configuration stays")
			require.Equal(t, http.StatusOK, chatStatus(t, base))
			require.True(t, srv.Discovery().Enabled(), "discovery keeps running")
		})
	}
	// The same switch made with backends kept is an ordinary reload.
	require.Equal(t, reloadApplied, srv.ReloadFile("router.yaml", []byte(strings.Replace(good, token, "another-admin-token-0123", 1))))
}
