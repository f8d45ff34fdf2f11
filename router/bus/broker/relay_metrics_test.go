package broker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/metrics"
)

// scrape renders a registry as the /metrics text.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if err := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain)).Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.String()
}

// A subscription relayed through a real broker session shows in the
// event-bus gauges, the coverage gauges and the per-broker subscription
// gauge, and its listing names the broker carrying it.
func TestRelayedSubscriptionMetrics(t *testing.T) {
	pub := startFloodPublisher(t)
	p := newRelayPKI(t)
	l, addr := relayListener(t, p, config.DefaultMaxStreamsPerSession)
	relayAgent(t, p, l, addr)

	sup := eventplane.NewSupervisor(eventplane.Family{Topic: discovery.TopicLoad, Limits: envelope.LoadLimits, Sink: &countingSink{}},
		eventplane.Policy{Transport: eventplane.TransportBroker, Bus: l}, clock.Real{}, slog.New(slog.DiscardHandler), nil)
	defer sup.Stop()
	cov := eventplane.NewCoverageReporter(clock.Real{}, l, func() []string { return []string{"dynamo", "other"} }, sup)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cov.Run(ctx, nil)

	reg := prometheus.NewRegistry()
	reg.MustRegister(l.Metrics().Collectors()...)
	reg.MustRegister(&metrics.BrokerCollector{Coverage: cov.Coverage})
	reg.MustRegister(&metrics.BrokerSubscriptionsCollector{
		Brokers:  func() []string { return []string{"broker-a", "broker-b"} },
		Families: []func() []eventplane.SubscriptionInfo{sup.Subscriptions},
		Names:    []string{discovery.TopicLoad},
	})

	sup.Reconcile(publisherSnapshot(pub.addr))
	waitFor(t, "the relayed subscription connected", allConnected(sup, 1))
	if b := sup.Subscriptions()[0].Broker; b != "broker-a" {
		t.Fatalf("carrying broker %q, want broker-a", b)
	}
	want := []string{
		`switchyard_dynamo_broker_subscriptions{broker="broker-a",family="kv_metrics"} 1`,
		`switchyard_dynamo_broker_subscriptions{broker="broker-b",family="kv_metrics"} 0`,
		`switchyard_dynamo_broker_namespace_sessions{namespace="dynamo"} 1`,
		`switchyard_dynamo_broker_namespace_sessions{namespace="other"} 0`,
		`switchyard_dynamo_broker_pending_subscriptions{family="kv_metrics",namespace="dynamo"} 0`,
		`switchyard_event_bus_sessions{role="broker"} 1`,
		`switchyard_event_bus_sessions{role="kv_listener"} 0`,
		`switchyard_event_bus_streams 1`,
		`switchyard_event_bus_stream_opens_total{result="opened"} 1`,
		`switchyard_event_bus_connections 1`,
	}
	var text string
	waitFor(t, "the gauges", func() bool {
		text = scrape(t, reg)
		for _, w := range want {
			if !strings.Contains(text, w) {
				return false
			}
		}
		return true
	})
	if !strings.Contains(text, `switchyard_event_bus_stream_bytes_total{direction="received"}`) ||
		strings.Contains(text, `switchyard_event_bus_stream_bytes_total{direction="received"} 0`) {
		t.Fatal("no received bytes counted")
	}

	// The subscription stops: its stream ends and no broker carries it.
	sup.Stop()
	waitFor(t, "the stream's end", func() bool {
		text = scrape(t, reg)
		return strings.Contains(text, `switchyard_event_bus_streams 0`) &&
			strings.Contains(text, `switchyard_dynamo_broker_subscriptions{broker="broker-a",family="kv_metrics"} 0`)
	})
}
