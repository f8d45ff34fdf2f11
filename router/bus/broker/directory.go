package broker

import (
	"strings"

	"switchyard/router/discovery"
	"switchyard/router/eventplane"
)

// SnapshotDirectory reads advertised publishers from a discovery
// snapshot: the kv_metrics and kv-events channels the router itself would
// subscribe to directly (eventplane.Targets), so the broker dials exactly
// what the router's own discovery could name.
type SnapshotDirectory func() *discovery.Snapshot

// Advertised reports whether namespace advertises a ZMQ channel at
// hostPort.
func (d SnapshotDirectory) Advertised(namespace, hostPort string) bool {
	snap := d()
	if snap == nil {
		return false
	}
	for _, topic := range []string{discovery.TopicLoad, discovery.TopicKVEvents} {
		ts, _ := eventplane.Targets(snap, topic)
		for _, t := range ts {
			if t.Namespace == namespace && strings.EqualFold(t.HostPort, hostPort) {
				return true
			}
		}
	}
	return false
}

// Count is the number of advertised channels in the snapshot.
func (d SnapshotDirectory) Count() int {
	snap := d()
	if snap == nil {
		return 0
	}
	n := 0
	for _, topic := range []string{discovery.TopicLoad, discovery.TopicKVEvents} {
		ts, _ := eventplane.Targets(snap, topic)
		n += len(ts)
	}
	return n
}
