package server

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/router/discovery"
	"switchyard/router/eventplane"
)

// The listener's Pod index holds the workers whose host is an IP address;
// an address two workers share names neither, so no message is credited
// to the wrong one.
func TestWorkersByAddr(t *testing.T) {
	snap := &discovery.Snapshot{View: discovery.View{Workers: []*discovery.Worker{
		{Namespace: "dynamo", InstanceID: 1, Host: "10.0.0.1"},
		{Namespace: "dynamo", InstanceID: 2, Host: "::ffff:10.0.0.2"},
		{Namespace: "dynamo", InstanceID: 3, Host: "pod-3.example"},
		{Namespace: "dynamo", InstanceID: 4, Host: "10.0.0.4"},
		{Namespace: "dynamo", InstanceID: 5, Host: "10.0.0.4"},
		{Namespace: "dynamo", InstanceID: 6},
	}}}
	require.Equal(t, map[netip.Addr]eventplane.Publisher{
		netip.MustParseAddr("10.0.0.1"): {Namespace: "dynamo", ID: 1},
		netip.MustParseAddr("10.0.0.2"): {Namespace: "dynamo", ID: 2},
	}, workersByAddr(snap))
}

// The index follows the registry: it is rebuilt when the generation moves.
func TestPodAddrsFollowTheGeneration(t *testing.T) {
	snap := &discovery.Snapshot{Generation: 1, View: discovery.View{Workers: []*discovery.Worker{{Namespace: "dynamo", InstanceID: 1, Host: "10.0.0.1"}}}}
	p := &podAddrs{snapshot: func() *discovery.Snapshot { return snap }}
	got, ok := p.resolve(netip.MustParseAddr("10.0.0.1"))
	require.True(t, ok)
	require.Equal(t, uint64(1), got.ID)
	snap = &discovery.Snapshot{Generation: 2, View: discovery.View{Workers: []*discovery.Worker{{Namespace: "dynamo", InstanceID: 9, Host: "10.0.0.9"}}}}
	_, ok = p.resolve(netip.MustParseAddr("10.0.0.1"))
	require.False(t, ok, "a Pod that left is unknown")
	got, ok = p.resolve(netip.MustParseAddr("10.0.0.9"))
	require.True(t, ok)
	require.Equal(t, uint64(9), got.ID)
}
