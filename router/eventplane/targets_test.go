package eventplane_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/load"
)

// A channel's replay socket follows the channel's own transport rules;
// one that fails them leaves the channel followed, without replay, and
// says why.
func TestTargetsCarryTheReplayEndpoint(t *testing.T) {
	pub := func(id uint64, kind, addr string) *discovery.Publisher {
		return &discovery.Publisher{Namespace: "dynamo", PublisherID: id, Topic: discovery.TopicKVEvents,
			TransportKind: "Zmq", Address: "tcp://10.0.0.1:5557", ReplayKind: kind, ReplayAddress: addr}
	}
	snap := &discovery.Snapshot{View: discovery.View{Publishers: []*discovery.Publisher{
		pub(1, "", ""),
		pub(2, "Zmq", "tcp://10.0.0.1:5558"),
		pub(3, "Nats", "nats://x"),
		pub(4, "Zmq", "ipc:///tmp/replay"),
		pub(5, "Zmq", "tcp://10.0.0.1"),
		pub(6, "Zmq", "tcp://10.0.0.1:70000"),
		pub(7, "", "tcp://10.0.0.1:5558"),
	}}}
	targets, skips := eventplane.Targets(snap, discovery.TopicKVEvents)
	require.Empty(t, skips)
	require.Len(t, targets, 7)
	want := []struct{ endpoint, refused string }{
		{"", ""},
		{"tcp://10.0.0.1:5558", ""},
		{"", `replay transport kind "Nats" is not dialed directly`},
		{"", "replay endpoint scheme is not tcp://"},
		{"", "replay endpoint is not tcp://host:port"},
		{"", "replay endpoint port is not 1-65535"},
		{"", `replay transport kind "" is not dialed directly`},
	}
	for i, tg := range targets {
		require.Equal(t, want[i].endpoint, tg.ReplayEndpoint, "publisher %d", tg.PublisherID)
		require.Equal(t, want[i].refused, tg.ReplayRefused, "publisher %d", tg.PublisherID)
	}
}

func TestZmqHostPort(t *testing.T) {
	hp, _, reason := eventplane.ZmqHostPort("tcp://[::1]:5558")
	require.Empty(t, reason)
	require.Equal(t, "[::1]:5558", hp)
	_, r, reason := eventplane.ZmqHostPort("tcp://h:0")
	require.Equal(t, envelope.Malformed, r)
	require.NotEmpty(t, reason)
}

// The admin view says whether a subscription can be replayed, and the
// host finds the replay endpoint by publisher.
func TestSupervisorExposesTheReplayEndpoint(t *testing.T) {
	counts := &resultCounts{}
	sup := newLoadSupervisor(load.NewStore(counts.inc), counts)
	defer sup.Stop()
	sup.SetPolicy(eventplane.Policy{Transport: eventplane.TransportBroker, Dialer: &eventplane.Dialer{}}) // nothing dials
	sup.Reconcile(&discovery.Snapshot{View: discovery.View{Publishers: []*discovery.Publisher{
		{Namespace: "dynamo", PublisherID: 9, Topic: discovery.TopicLoad, TransportKind: "Zmq",
			Address: "tcp://127.0.0.1:1", ReplayKind: "Zmq", ReplayAddress: "tcp://127.0.0.1:2"},
	}}})
	subs := sup.Subscriptions()
	require.Len(t, subs, 1)
	require.True(t, subs[0].Replay)
	tg, ok := sup.Target("dynamo", 9)
	require.True(t, ok)
	require.Equal(t, "tcp://127.0.0.1:2", tg.ReplayEndpoint)
	_, ok = sup.Target("dynamo", 10)
	require.False(t, ok)
}
