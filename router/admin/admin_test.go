package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fixtures"
	"switchyard/router/discovery"
	"switchyard/router/eventplane"
	"switchyard/router/events"
)

// fixedStatus serves a snapshot folded by the real reducer from fixtures.
type fixedStatus struct {
	enabled bool
	snap    *discovery.Snapshot
}

func (f fixedStatus) Enabled() bool                 { return f.enabled }
func (f fixedStatus) Connected() bool               { return true }
func (f fixedStatus) Source() string                { return "etcd" }
func (f fixedStatus) Namespaces() []string          { return []string{"dynamo"} }
func (f fixedStatus) Snapshot() *discovery.Snapshot { return f.snap }
func (f fixedStatus) Subscriptions() []eventplane.SubscriptionInfo {
	return []eventplane.SubscriptionInfo{{Family: "kv_metrics", Namespace: "dynamo", PublisherID: 2046539,
		Component: "decode", State: eventplane.Connected, Transport: "direct", Parked: true},
		{Family: "kv-events", Namespace: "dynamo", PublisherID: 2046540, Component: "decode", State: eventplane.Connected,
			Transport: "direct", Replay: true},
		{Family: "kv-events", Namespace: "dynamo", PublisherID: 2046541, Component: "decode", State: eventplane.Backoff,
			Transport: "direct", ReplayRefused: true}}
}

func fixtureSnapshot(t *testing.T) *discovery.Snapshot {
	recs, err := fixtures.EtcdFleet("disagg_scoped")
	require.NoError(t, err)
	var kvs []events.DiscoveryRecord
	for _, r := range recs {
		ks := events.Instances
		switch {
		case strings.HasPrefix(r.Key, "v1/mdc/"):
			ks = events.Models
		case strings.HasPrefix(r.Key, "v1/event_channels/"):
			ks = events.EventChannels
		}
		kvs = append(kvs, events.DiscoveryRecord{Keyspace: ks, Key: r.Key, Value: r.Value})
	}
	reg := discovery.NewRegistry()
	f := discovery.NewFollower(discovery.NewReducer(nil, nil), reg)
	at := time.Date(2026, 9, 23, 4, 11, 2, 0, time.UTC)
	f.Apply([]events.Event{events.DiscoveryResync{At: at, Namespace: "dynamo", Records: kvs}})
	return reg.Snapshot()
}

func serve(t *testing.T, token string, st DynamoStatus, authz string) (*http.Response, string) {
	var a Auth
	a.SetToken(token)
	srv := httptest.NewServer(a.Wrap(Handler(st, func() any { return map[string]string{"admin": "****"} })))
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/admin/dynamo/workers", nil)
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestAdminRequiresTheBearerToken(t *testing.T) {
	st := fixedStatus{enabled: true, snap: &discovery.Snapshot{}}
	for _, c := range []struct {
		token, authz string
		want         int
	}{
		{"s3cret", "", 401},
		{"s3cret", "Bearer wrong", 401},
		{"s3cret", "Basic s3cret", 401},
		{"s3cret", "Bearer s3cret", 200},
		{"", "Bearer ", 401},
		{"", "Bearer anything", 401},
	} {
		resp, body := serve(t, c.token, st, c.authz)
		require.Equal(t, c.want, resp.StatusCode, "token %q authz %q", c.token, c.authz)
		if c.want == 401 {
			require.Contains(t, body, `"code": "unauthenticated"`)
		}
	}
}

func TestWorkersResponseShape(t *testing.T) {
	resp, body := serve(t, "tok", fixedStatus{enabled: true, snap: fixtureSnapshot(t)}, "Bearer tok")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.Equal(t, true, got["enabled"])
	require.Equal(t, "etcd", got["source"])
	require.Equal(t, map[string]any{"load": true, "capacity": true}, got["signals"])
	require.Equal(t, "dynamo", got["namespace"])
	require.Equal(t, float64(1), got["generation"])
	require.Equal(t, float64(1), got["load_publishers"])
	require.Equal(t, float64(1), got["kv_event_publishers"])
	workers := got["workers"].([]any)
	require.Len(t, workers, 2)
	decode := workers[0].(map[string]any)
	require.Equal(t, map[string]any{
		"instance_id": "1a7f2b", "namespace": "dynamo", "worker_id": "1736491", "role": "decode",
		"model": "Qwen/Qwen3-32B", "component": "decode", "endpoint": "generate",
		"dp_start_rank": float64(2), "dp_size": float64(4), "block_size": float64(64),
		"capacity": map[string]any{"total_kv_blocks": float64(12000), "max_num_batched_tokens": float64(8192),
			"max_num_seqs": float64(256), "context_length": float64(32768)},
		"disaggregated_endpoint": "dynamo/prefill/generate",
		"first_seen":             "2026-09-23T04:11:02+00:00", "last_updated": "2026-09-23T04:11:02+00:00",
	}, decode)
	require.Equal(t, []any{map[string]any{"family": "kv_metrics", "publisher_id": "2046539", "namespace": "dynamo",
		"component": "decode", "state": "connected", "transport": "direct", "parked": true},
		map[string]any{"family": "kv-events", "publisher_id": "2046540", "namespace": "dynamo",
			"component": "decode", "state": "connected", "transport": "direct", "replay": true},
		map[string]any{"family": "kv-events", "publisher_id": "2046541", "namespace": "dynamo",
			"component": "decode", "state": "backoff", "transport": "direct", "replay_refused": true},
	}, got["subscriptions"])
	// Nothing internal leaks: transport addresses, publisher endpoints, raw cards.
	for _, secret := range []string{"10.0.0", "tcp://", "slug", "31000", "41000", "nats_tcp"} {
		require.NotContains(t, body, secret)
	}
}

func TestWorkersWhenDisabled(t *testing.T) {
	resp, body := serve(t, "tok", fixedStatus{enabled: false}, "Bearer tok")
	require.Equal(t, 200, resp.StatusCode)
	require.JSONEq(t, `{"enabled":false,"connected":false,"generation":0,"workers":[],"load_publishers":0,"kv_event_publishers":0}`, body)
}
