package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"switchyard/router/eventplane"
)

// Only configured broker ids become label values: a carrier a reload
// removed, and direct subscriptions, are not series; a duplicated id is
// one series.
func TestBrokerSubscriptionsCollector(t *testing.T) {
	loads := []eventplane.SubscriptionInfo{
		{Family: "kv_metrics", Broker: "broker-a"}, {Family: "kv_metrics", Broker: "broker-a"},
		{Family: "kv_metrics", Broker: "removed"}, {Family: "kv_metrics"},
	}
	kvs := []eventplane.SubscriptionInfo{{Family: "kv-events", Broker: "broker-b"}}
	ids := []string{"broker-a", "broker-b", "broker-a"}
	c := &BrokerSubscriptionsCollector{
		Brokers:  func() []string { return ids },
		Families: []func() []eventplane.SubscriptionInfo{func() []eventplane.SubscriptionInfo { return loads }, func() []eventplane.SubscriptionInfo { return kvs }},
		Names:    []string{"kv_metrics", "kv-events"},
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	want := `
# HELP switchyard_dynamo_broker_subscriptions Subscriptions whose stream a broker's event-bus session carries, by family and configured broker id.
# TYPE switchyard_dynamo_broker_subscriptions gauge
switchyard_dynamo_broker_subscriptions{broker="broker-a",family="kv-events"} 0
switchyard_dynamo_broker_subscriptions{broker="broker-a",family="kv_metrics"} 2
switchyard_dynamo_broker_subscriptions{broker="broker-b",family="kv-events"} 1
switchyard_dynamo_broker_subscriptions{broker="broker-b",family="kv_metrics"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	// The event bus disabled: no brokers, no series.
	ids = nil
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("%d series without brokers", n)
	}
}
