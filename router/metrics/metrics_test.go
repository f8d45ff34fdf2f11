package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"switchyard/router/core"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/kv"
	"switchyard/router/picker"
)

func TestDiscoveryLabelsAreClosed(t *testing.T) {
	s := New()
	s.Discovery.CountDiscovery("put")
	s.Discovery.CountDiscovery("attacker-chosen")
	if got := testutil.ToFloat64(s.Discovery.Events.WithLabelValues("put")); got != 1 {
		t.Fatalf("put = %v", got)
	}
	if got := testutil.ToFloat64(s.Discovery.Events.WithLabelValues("malformed")); got != 1 {
		t.Fatalf("unknown kind not folded into malformed: %v", got)
	}
	if n := testutil.CollectAndCount(s.Discovery.Events); n != len(discovery.EventKinds) {
		t.Fatalf("%d series, want exactly the %d closed kinds", n, len(discovery.EventKinds))
	}
}

func TestObserveSnapshot(t *testing.T) {
	s := New()
	s.Discovery.ObserveSnapshot(&discovery.Snapshot{Generation: 7, View: discovery.View{Workers: []*discovery.Worker{
		{Role: discovery.RolePrefill}, {Role: discovery.RoleDecode}, {Role: discovery.RoleDecode},
	}}})
	want := `
# HELP switchyard_dynamo_workers Discovered Dynamo workers by role.
# TYPE switchyard_dynamo_workers gauge
switchyard_dynamo_workers{role="aggregated"} 0
switchyard_dynamo_workers{role="decode"} 2
switchyard_dynamo_workers{role="prefill"} 1
switchyard_dynamo_workers{role="unknown"} 0
`
	if err := testutil.CollectAndCompare(s.Discovery.Workers, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.Discovery.Generation); got != 7 {
		t.Fatalf("generation = %v", got)
	}
}

func TestSelectionCountsAreClosed(t *testing.T) {
	s := New()
	s.Selection.Count("decode", "load")
	s.Selection.Count("decode", "made-up")
	s.Selection.Count("router", "load")
	if got := testutil.ToFloat64(s.Selection.Total.WithLabelValues("decode", "load")); got != 1 {
		t.Fatalf("decode/load = %v", got)
	}
	if n, want := testutil.CollectAndCount(s.Selection.Total), 2*len(picker.Reasons); n != want {
		t.Fatalf("%d series, want 2 roles x %d reasons", n, len(picker.Reasons))
	}
}

// The kv-events and KV selection counters are pre-registered over their
// closed sets (the tracker's results plus what the subscription
// supervisor counts itself), and nothing outside them creates a series.
func TestKVCountsAreClosed(t *testing.T) {
	s := New()
	results := map[string]bool{}
	for _, r := range kv.EventResults() {
		results[r] = true
	}
	results["transport_refused"] = true
	if n := testutil.CollectAndCount(s.KV.Events); n != len(results) {
		t.Fatalf("%d kv-events series, want %d", n, len(results))
	}
	s.KV.CountEvent("applied")
	s.KV.CountEvent("attacker-chosen")
	s.KV.CountSubscription(envelope.TransportRefused)
	s.KV.CountSubscription(envelope.Unsupported)
	for r, want := range map[string]float64{"applied": 1, "malformed": 1, "transport_refused": 1, "unsupported": 1, "gap": 0} {
		if got := testutil.ToFloat64(s.KV.Events.WithLabelValues(r)); got != want {
			t.Errorf("kv events %s = %v, want %v", r, got, want)
		}
	}
	if n := testutil.CollectAndCount(s.KV.Events); n != len(results) {
		t.Fatalf("%d kv-events series after counting, want %d", n, len(results))
	}

	s.KV.CountSelection(picker.KVTokenizerUnavailable)
	s.KV.CountSelection("made-up")
	if got := testutil.ToFloat64(s.KV.Selection.WithLabelValues(picker.KVTokenizerUnavailable)); got != 1 {
		t.Fatalf("tokenizer_unavailable = %v", got)
	}
	if n := testutil.CollectAndCount(s.KV.Selection); n != len(picker.KVResults) {
		t.Fatalf("%d kv selection series, want %d", n, len(picker.KVResults))
	}
}

// Gap recovery's counter is pre-registered over the core's closed set;
// counts add up and nothing else creates a series.
func TestKVReplayCountsAreClosed(t *testing.T) {
	s := New()
	if n := testutil.CollectAndCount(s.KV.Replay); n != len(core.KVReplayResults()) {
		t.Fatalf("%d kv replay series, want %d", n, len(core.KVReplayResults()))
	}
	s.KV.CountReplay(core.ReplayLost, 3)
	s.KV.CountReplay(core.ReplayLost, 2)
	s.KV.CountReplay("made-up", 1)
	if got := testutil.ToFloat64(s.KV.Replay.WithLabelValues(core.ReplayLost)); got != 5 {
		t.Fatalf("lost = %v, want 5", got)
	}
	if n := testutil.CollectAndCount(s.KV.Replay); n != len(core.KVReplayResults()) {
		t.Fatalf("%d kv replay series after counting, want %d", n, len(core.KVReplayResults()))
	}
}

// Subscription states and index sizes are read at scrape time, every
// (state, transport) pair exported, zeros included.
func TestKVCollector(t *testing.T) {
	subs := []eventplane.SubscriptionInfo{
		{State: eventplane.Connected, Transport: eventplane.TransportDirect, Parked: true},
		{State: eventplane.Connected, Transport: eventplane.TransportDirect},
		{State: eventplane.Backoff, Transport: eventplane.TransportDirect},
		{State: eventplane.Pending, Transport: eventplane.TransportBroker},
	}
	nodes, owned := 7, 12
	c := &KVCollector{Subscriptions: func() []eventplane.SubscriptionInfo { return subs }, Size: func() (int, int) { return nodes, owned }}
	want := `
# HELP switchyard_dynamo_kv_index_nodes Distinct block prefixes the KV index holds (device tier).
# TYPE switchyard_dynamo_kv_index_nodes gauge
switchyard_dynamo_kv_index_nodes 7
# HELP switchyard_dynamo_kv_index_ownerships (worker rank, block) pairs the KV index holds.
# TYPE switchyard_dynamo_kv_index_ownerships gauge
switchyard_dynamo_kv_index_ownerships 12
# HELP switchyard_dynamo_kv_parked_subscriptions Connected kv-events subscriptions whose idle session is parked with the poller (no reading goroutine).
# TYPE switchyard_dynamo_kv_parked_subscriptions gauge
switchyard_dynamo_kv_parked_subscriptions 1
# HELP switchyard_dynamo_kv_subscriptions kv-events subscriptions by state and transport.
# TYPE switchyard_dynamo_kv_subscriptions gauge
switchyard_dynamo_kv_subscriptions{state="backoff",transport="broker"} 0
switchyard_dynamo_kv_subscriptions{state="backoff",transport="direct"} 1
switchyard_dynamo_kv_subscriptions{state="connected",transport="broker"} 0
switchyard_dynamo_kv_subscriptions{state="connected",transport="direct"} 2
switchyard_dynamo_kv_subscriptions{state="connecting",transport="broker"} 0
switchyard_dynamo_kv_subscriptions{state="connecting",transport="direct"} 0
switchyard_dynamo_kv_subscriptions{state="pending",transport="broker"} 1
switchyard_dynamo_kv_subscriptions{state="pending",transport="direct"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	subs, nodes, owned = nil, 0, 0
	if err := testutil.CollectAndCompare(c, strings.NewReader(strings.NewReplacer(
		"} 1", "} 0", "} 2", "} 0", "subscriptions 1", "subscriptions 0", "nodes 7", "nodes 0", "ownerships 12", "ownerships 0").Replace(want))); err != nil {
		t.Fatal(err)
	}
}

func TestPromptRewriteResultsAreClosed(t *testing.T) {
	s := New()
	s.Gateway.CountPromptRewrite(RewriteRewritten)
	s.Gateway.CountPromptRewrite("attacker-chosen")
	if got := testutil.ToFloat64(s.Gateway.PromptRewrites.WithLabelValues(RewriteRewritten)); got != 1 {
		t.Fatalf("rewritten = %v", got)
	}
	if got := testutil.ToFloat64(s.Gateway.PromptRewrites.WithLabelValues(RewriteUnreadable)); got != 1 {
		t.Fatalf("unknown result not folded into unreadable: %v", got)
	}
	if n := testutil.CollectAndCount(s.Gateway.PromptRewrites); n != len(RewriteResults) {
		t.Fatalf("%d series, want exactly the %d closed results", n, len(RewriteResults))
	}
}

// The gateway's resolved series cover its label sets exactly, and each
// request lands in the series its labels name.
func TestGatewayResolvedSeries(t *testing.T) {
	require.Len(t, Routes, numRoutes)
	require.Len(t, statusLabels, numStatusLabels)
	require.Len(t, BackendResults, numBackendResults)
	require.Len(t, RoutingPaths, numRoutingPaths)

	g := New().Gateway
	g.SetBackends([]string{"a"})
	g.ObserveRequest(RouteChatCompletions, 200, time.Millisecond)
	g.ObserveRequest(RouteChatCompletions, 200, time.Millisecond)
	g.ObserveRequest("nonsense", 418, time.Millisecond)
	g.ObserveRequest(RouteModels, 999, time.Millisecond)
	g.CountBackend("a", ResultTimeout)
	g.CountBackend("a", "nonsense")
	g.CountBackend("gone", ResultOK)
	g.CountRoutingPath(PathDisaggregated)
	g.CountRoutingPath("nonsense")
	require.Equal(t, 2.0, testutil.ToFloat64(g.Requests.WithLabelValues(RouteChatCompletions, "200")))
	require.Equal(t, 1.0, testutil.ToFloat64(g.Requests.WithLabelValues(RouteOther, "4xx")))
	require.Equal(t, 1.0, testutil.ToFloat64(g.Requests.WithLabelValues(RouteModels, "other")))
	require.Equal(t, 3, testutil.CollectAndCount(g.Requests), "only the codes answered have a series")
	require.Equal(t, 1.0, testutil.ToFloat64(g.Backend.WithLabelValues("a", ResultTimeout)))
	require.Equal(t, 1.0, testutil.ToFloat64(g.Backend.WithLabelValues("a", ResultConnectError)))
	require.Equal(t, 1.0, testutil.ToFloat64(g.DisaggRequests.WithLabelValues(PathDisaggregated)))
	require.Equal(t, 1.0, testutil.ToFloat64(g.DisaggRequests.WithLabelValues(PathUnified)))

	g.SetBackends(nil)
	g.CountBackend("a", ResultOK)
	require.Equal(t, 0, testutil.CollectAndCount(g.Backend), "a removed backend has no series")
}
