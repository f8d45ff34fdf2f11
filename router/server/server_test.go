package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"switchyard/fakefleet/registrar"
	"switchyard/fakefleet/wire"
	"switchyard/internal/kubetest"
	"switchyard/router/admin"
	"switchyard/router/config"
	"switchyard/router/httpd"
	"switchyard/router/load"
)

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

func loadKey(worker uint64) load.Key { return load.Key{Namespace: "dynamo", WorkerID: worker} }

// zmq4's PUB leaves its writer goroutine behind on Close; it is the test
// publisher's, not the router's.
// The Kubernetes API server the peer-service test starts stops before the
// leak check.
func TestMain(m *testing.M) {
	code := m.Run()
	kubetest.Stop()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

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
	}, 2, nil)
	require.NoError(t, err)
	// Endpoint and card are separate puts: wait for the card to have joined.
	eventually(t, "the worker with its card", func() bool {
		ws := workers(t, base, "first")
		return len(ws) == 1 && ws[0]["model"] == "m"
	})
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

// A worker advertising a kv_metrics publisher: the router subscribes, the
// admin API lists the subscription (never its address), per-rank gauges
// appear, and everything goes when the worker's lease lapses.
func TestLoadSignalsEndToEnd(t *testing.T) {
	srv, err := New(embeddedConfig("tok"), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer srv.Close()
	base := "http://" + srv.Addr()

	pubAddr := freeAddr(t)
	pub := zmq4.NewPub(context.Background())
	require.NoError(t, pub.Listen("tcp://"+pubAddr))
	defer pub.Close()

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	const publisherID = 3141592653
	reg, err := registrar.Register(context.Background(), cli, registrar.Worker{
		Namespace: "dynamo", Component: "decode", WorkerType: "decode", Model: "m", BlockSize: 16,
		TotalKVBlocks: 64, MaxNumBatchedTokens: 512, MaxNumSeqs: 4, ContextLength: 1024, Transport: "127.0.0.1:9/x",
		Channels: []registrar.Channel{{Topic: "kv_metrics", PublisherID: publisherID, Endpoint: "tcp://" + pubAddr}},
	}, 2, nil)
	require.NoError(t, err)
	worker := reg.InstanceID()

	var body map[string]any
	eventually(t, "a connected subscription", func() bool {
		code, b := get(t, base+"/admin/dynamo/workers", "tok")
		body = nil
		_ = json.Unmarshal(b, &body)
		subs, _ := body["subscriptions"].([]any)
		return code == 200 && len(subs) == 1 && subs[0].(map[string]any)["state"] == "connected"
	})
	require.Equal(t, float64(1), body["load_publishers"])
	sub := body["subscriptions"].([]any)[0].(map[string]any)
	require.Equal(t, map[string]any{"family": "kv_metrics", "publisher_id": "3141592653", "namespace": "dynamo",
		"component": "decode", "state": "connected", "transport": "direct"}, sub)
	_, raw := get(t, base+"/admin/dynamo/workers", "tok")
	require.NotContains(t, string(raw), pubAddr, "publisher addresses are never exported")

	// Publish until the sample lands (a PUB drops what precedes the subscription).
	series := fmt.Sprintf(`switchyard_dynamo_worker_kv_used_blocks{dp_rank="0",namespace="dynamo",worker="%x"} 42`, worker)
	seq := uint64(1)
	eventually(t, "the worker's load gauge", func() bool {
		_ = pub.Send(zmq4.NewMsgFrom(wire.LoadMessage(publisherID, seq, wire.ActiveLoad{WorkerID: worker, KVUsedBlocks: wire.U64(42)}, time.Now())...))
		seq++
		_, m := get(t, base+"/metrics", "")
		return strings.Contains(string(m), series)
	})
	_, m := get(t, base+"/metrics", "")
	require.Contains(t, string(m), `switchyard_dynamo_load_events_total{result="applied"}`)
	require.Contains(t, string(m), `switchyard_dynamo_load_subscriptions{state="connected",transport="direct"} 1`)
	require.NotContains(t, string(m), "switchyard_dynamo_worker_active_decode_blocks{", "nil fields export no series")
	_, ok := srv.Loads().FreshDefault(loadKey(worker), time.Now())
	require.True(t, ok)

	// Reloads: max_staleness applies at once; a dial-policy change restarts
	// only the subscriptions (the fleet and its samples' store stay).
	gen := srv.Registry().Generation()
	narrow := embeddedConfig("tok")
	narrow.Dynamo.Load.MaxStaleness = config.Duration(7 * time.Second)
	narrow.Dynamo.Load.DirectAllowCIDRs = []string{"10.0.0.0/8"}
	require.NoError(t, srv.Reload(narrow))
	require.Equal(t, 7*time.Second, srv.Loads().MaxStaleness())
	subState := func() string {
		_, b := get(t, base+"/admin/dynamo/workers", "tok")
		var body struct {
			Subscriptions []struct{ State string } `json:"subscriptions"`
		}
		_ = json.Unmarshal(b, &body)
		if len(body.Subscriptions) != 1 {
			return ""
		}
		return body.Subscriptions[0].State
	}
	eventually(t, "the refused dial", func() bool { return subState() == "backoff" })
	require.NoError(t, srv.Reload(embeddedConfig("tok")))
	eventually(t, "the reconnect", func() bool { return subState() == "connected" })
	require.Equal(t, gen, srv.Registry().Generation(), "discovery was not touched")

	// The broker transport with no event-bus session: the subscription
	// waits pending (never dialing directly), and the admin listing and
	// the gauges show the uncovered namespace.
	broker := embeddedConfig("tok")
	broker.Dynamo.Load.Transport = config.TransportBroker
	require.NoError(t, srv.Reload(broker))
	eventually(t, "pending under the broker transport", func() bool { return subState() == "pending" })
	eventually(t, "broker_coverage", func() bool {
		_, b := get(t, base+"/admin/dynamo/workers", "tok")
		var body struct {
			Coverage []admin.BrokerCoverageJSON `json:"broker_coverage"`
		}
		_ = json.Unmarshal(b, &body)
		return len(body.Coverage) == 1 && body.Coverage[0].Namespace == "dynamo" && body.Coverage[0].Sessions == 0 &&
			body.Coverage[0].PendingSubscriptions["kv_metrics"] == 1
	})
	eventually(t, "the broker gauges", func() bool {
		_, m := get(t, base+"/metrics", "")
		return strings.Contains(string(m), `switchyard_dynamo_broker_pending_subscriptions{family="kv_metrics",namespace="dynamo"} 1`) &&
			strings.Contains(string(m), `switchyard_dynamo_broker_namespace_sessions{namespace="dynamo"} 0`) &&
			strings.Contains(string(m), `switchyard_dynamo_load_subscriptions{state="pending",transport="broker"} 1`)
	})
	require.NoError(t, srv.Reload(embeddedConfig("tok")))
	eventually(t, "back to direct", func() bool { return subState() == "connected" })
	_, raw = get(t, base+"/admin/dynamo/workers", "tok")
	require.NotContains(t, string(raw), "broker_coverage", "only under the broker transport")
	require.Equal(t, gen, srv.Registry().Generation(), "discovery was not touched")

	// The worker dies: its series, sample and subscription go.
	reg.Kill()
	eventually(t, "the departed worker's series to vanish", func() bool {
		_, m := get(t, base+"/metrics", "")
		return !strings.Contains(string(m), "switchyard_dynamo_worker_kv_used_blocks{")
	})
	require.Zero(t, srv.Loads().Len())
	eventually(t, "the subscription to stop", func() bool {
		_, m := get(t, base+"/metrics", "")
		return strings.Contains(string(m), `switchyard_dynamo_load_subscriptions{state="connected",transport="direct"} 0`)
	})
}

// streamingUpstream is an OpenAI-wire backend whose chat streams send one
// event per tick for the given number of ticks (forever when n < 0).
func streamingUpstream(t *testing.T, n int, tick time.Duration) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; n < 0 || i < n; i++ {
			if _, err := fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%d \"}}]}\n\n", i); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(tick):
			}
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func gatewayConfig(upstream string) *config.Config {
	c := config.Default()
	c.Server.BindAddress = "127.0.0.1:0"
	c.Admin.Token = "tok"
	b := config.DefaultBackend()
	b.Name, b.URL, b.Models = "vllm", upstream, []string{"m"}
	c.Backends = []config.Backend{b}
	c.APIKeys = []config.APIKey{{Key: "client-key-0123456789"}}
	return c
}

func chat(t *testing.T, base string, stream bool) *http.Response {
	body := fmt.Sprintf(`{"model":"m","stream":%t,"messages":[{"role":"user","content":"hi"}]}`, stream)
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer client-key-0123456789")
	req.Header.Set("X-Dynamo-Worker-Instance-Id", "1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

// The gateway is mounted on the server's listener, with its metrics on
// /metrics and its keys masked in the config readback.
func TestServerServesTheGateway(t *testing.T) {
	up := streamingUpstream(t, 3, time.Millisecond)
	srv, err := New(gatewayConfig(up.URL), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer srv.Close()
	base := "http://" + srv.Addr()

	resp := chat(t, base, true)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, string(b))
	require.Contains(t, string(b), "data: [DONE]")
	for k := range resp.Header {
		require.False(t, strings.HasPrefix(strings.ToLower(k), "x-dynamo-"), k)
	}

	code, _ := get(t, base+"/v1/models", "wrong")
	require.Equal(t, 401, code)
	code, body := get(t, base+"/v1/models", "client-key-0123456789")
	require.Equal(t, 200, code)
	require.JSONEq(t, `{"object":"list","data":[{"id":"m","object":"model","created":0,"owned_by":"switchyard"}]}`, string(body))

	_, m := get(t, base+"/metrics", "")
	for _, want := range []string{
		`switchyard_http_requests_total{code="200",route="chat_completions"} 1`,
		`switchyard_http_requests_total{code="401",route="models"} 1`,
		`switchyard_backend_requests_total{backend="vllm",result="ok"} 1`,
		`switchyard_backend_healthy{backend="vllm"} 1`,
		`switchyard_disaggregated_requests_total{routing_path="unified"} 1`,
		`switchyard_disaggregated_errors_total{phase="orchestration"} 0`,
		`switchyard_http_request_duration_seconds_count{route="chat_completions"} 1`,
		`switchyard_dynamo_selection_total{reason="load",role="decode"} 0`,
	} {
		require.Contains(t, string(m), want)
	}

	_, cfg := get(t, base+"/admin/config", "tok")
	require.NotContains(t, string(cfg), "client-key-0123456789")
	require.Contains(t, string(cfg), `"api_keys"`)

	// A reload swaps the keys at once.
	next := gatewayConfig(up.URL)
	next.APIKeys[0].Key = "rotated-key-0123456789"
	require.NoError(t, srv.Reload(next))
	code, _ = get(t, base+"/v1/models", "client-key-0123456789")
	require.Equal(t, 401, code)
	code, _ = get(t, base+"/v1/models", "rotated-key-0123456789")
	require.Equal(t, 200, code)
}

// Close drains a stream in flight within gateway.shutdown_grace.
func TestCloseDrainsStreams(t *testing.T) {
	up := streamingUpstream(t, 8, 50*time.Millisecond)
	srv, err := New(gatewayConfig(up.URL), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	resp := chat(t, "http://"+srv.Addr(), true)
	require.Equal(t, 200, resp.StatusCode)

	closed := make(chan struct{})
	go func() {
		srv.Close()
		close(closed)
	}()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(b), "7 ", "every event arrived")
	require.Contains(t, string(b), "data: [DONE]")
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the stream ended")
	}
}

// A stream still running when the grace runs out is cut, and Close returns.
func TestCloseCutsStreamsAfterGrace(t *testing.T) {
	up := streamingUpstream(t, -1, 20*time.Millisecond)
	cfg := gatewayConfig(up.URL)
	cfg.Gateway.ShutdownGrace = config.Duration(200 * time.Millisecond)
	srv, err := New(cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	resp := chat(t, "http://"+srv.Addr(), true)
	require.Equal(t, 200, resp.StatusCode)
	defer resp.Body.Close()

	start := time.Now()
	srv.Close()
	require.Less(t, time.Since(start), 5*time.Second)
	_, err = io.ReadAll(resp.Body)
	require.Error(t, err, "the stream was cut, not finished")
}

// Every ingress is mounted on the server, not only the OpenAI ones.
func TestIngressesAreMounted(t *testing.T) {
	srv, err := New(embeddedConfig("tok"), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer srv.Close()
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/messages", "/anthropic/v1/messages", "/v1/responses"} {
		resp, err := http.Post("http://"+srv.Addr()+path, "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", path, b)
		require.Contains(t, string(b), "model", "%s answers with its own validation error", path)
	}
}

// A head the builtin server refuses is answered and counted under its
// reason on the router's own metrics.
func TestRefusedHeadsAreCounted(t *testing.T) {
	srv, err := New(embeddedConfig("tok"), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "GARBAGE\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, 1.0, metricValue(t, srv, `switchyard_gateway_refused_requests_total{reason="malformed"}`))
	// The refused connection is closed; the one scraping is open.
	eventually(t, "the refused connection to be let go", func() bool {
		return metricValue(t, srv, "switchyard_http_open_connections") == 1
	})
}

// A client that connected and sent nothing does not hold the stop:
// net/http's Shutdown alone would wait 5 s for it; the grace here is
// longer still, so only closing silent connections makes Close quick.
func TestCloseEndsSilentConnections(t *testing.T) {
	for _, server := range []string{config.ServerBuiltin, config.ServerNetHTTP} {
		t.Run(strings.ReplaceAll(server, "/", "_"), func(t *testing.T) {
			up := streamingUpstream(t, 1, time.Millisecond)
			cfg := gatewayConfig(up.URL)
			cfg.Gateway.ShutdownGrace = config.Duration(time.Minute)
			cfg.Gateway.Server = server
			srv, err := New(cfg, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			silent, err := net.Dial("tcp", srv.Addr())
			require.NoError(t, err)
			defer silent.Close()
			// A request on another connection proves the server has accepted
			// (and seen the state of) connections before the stop.
			resp := chat(t, "http://"+srv.Addr(), false)
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			eventually(t, "the silent connection to be tracked", func() bool {
				switch h := srv.http.(type) {
				case *httpd.Server:
					return h.OpenConns() == 2
				case *netHTTPServer:
					h.silent.mu.Lock()
					defer h.silent.mu.Unlock()
					return len(h.silent.conns) > 0
				}
				return false
			})

			start := time.Now()
			srv.Close()
			require.Less(t, time.Since(start), 5*time.Second, "Close waited for the silent connection")
			_ = silent.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = silent.Read(make([]byte, 1))
			require.Error(t, err, "the silent connection is closed")
		})
	}
}
