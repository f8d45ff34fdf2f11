package eventplane_test

import (
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/internal/pypeer"
	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/load"
)

type resultCounts struct {
	mu sync.Mutex
	n  map[envelope.Result]int
}

func (c *resultCounts) inc(r envelope.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[envelope.Result]int{}
	}
	c.n[r]++
}

func (c *resultCounts) get(r envelope.Result) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[r]
}

func fleet(workerID, publisherID uint64, addr string) *discovery.Snapshot {
	return &discovery.Snapshot{View: discovery.View{
		Workers: []*discovery.Worker{{Namespace: "dynamo", InstanceID: workerID, Role: discovery.RoleDecode,
			Runtime: discovery.RuntimeConfig{DPSize: 2}}},
		Publishers: []*discovery.Publisher{{Namespace: "dynamo", PublisherID: publisherID, Topic: discovery.TopicLoad,
			ScopeKind: "endpoint", Component: "decode", Endpoint: "generate", TransportKind: "Zmq", Address: addr}},
	}}
}

func newLoadSupervisor(store *load.Store, counts *resultCounts, allow ...string) *eventplane.Supervisor {
	prefixes, err := eventplane.ParseAllow(allow)
	if err != nil {
		panic(err)
	}
	if len(allow) == 0 {
		prefixes = nil
	}
	return eventplane.NewSupervisor(eventplane.Family{Topic: discovery.TopicLoad, Limits: envelope.LoadLimits,
		Sink: load.Subscriber{Store: store}}, eventplane.Policy{Transport: eventplane.TransportDirect,
		Dialer: &eventplane.Dialer{Allow: prefixes}}, clock.Real{}, slog.New(slog.DiscardHandler), counts.inc)
}

// A libzmq publisher encoding with python's msgpack, end to end through
// the subscription supervisor, the ZMTP client, the decoders and the store.
func TestInteropWithLibzmqAndPythonMsgpack(t *testing.T) {
	const worker, pub = 1736491, 2046539
	py := pypeer.Start(t, "testdata/kv_metrics_pub.py", "--publisher-id", strconv.Itoa(pub), "--worker-id", strconv.Itoa(worker))
	port := py.Expect(t, "port ")

	counts := &resultCounts{}
	store := load.NewStore(counts.inc)
	sup := newLoadSupervisor(store, counts)
	defer sup.Stop()
	snap := fleet(worker, pub, "tcp://127.0.0.1:"+port)
	store.SetLive(snap)
	sup.Reconcile(snap)

	require.Equal(t, "016b765f6d657472696373", py.Expect(t, "subscribed "), "subscribed with 0x01 + kv_metrics")
	py.Expect(t, "done")
	eventually(t, "every scripted message", func() bool {
		return counts.get(envelope.Applied)+counts.get(envelope.Duplicate)+counts.get(envelope.UnknownVersion)+counts.get(envelope.Oversized) == 7
	})
	require.Equal(t, 4, counts.get(envelope.Applied))
	require.Equal(t, 1, counts.get(envelope.Duplicate))
	require.Equal(t, 1, counts.get(envelope.UnknownVersion))
	require.Equal(t, 1, counts.get(envelope.Oversized))
	require.Zero(t, counts.get(envelope.TopicMismatch), "the publisher filtered the other topic")

	rank0, ok := store.Latest(load.Key{Namespace: "dynamo", WorkerID: worker, DPRank: 0})
	require.True(t, ok)
	require.Equal(t, uint64(12), rank0.KVUsedBlocks)
	require.False(t, rank0.HasDecodeBlocks)
	require.Equal(t, uint64(5), rank0.Sequence)
	_, ok = store.Latest(load.Key{Namespace: "dynamo", WorkerID: worker, DPRank: 1})
	require.False(t, ok, "the gap before sequence 5 dropped rank 1's sample")

	subs := sup.Subscriptions()
	require.Len(t, subs, 1)
	require.Equal(t, eventplane.Connected, subs[0].State)

	// The worker departs: its subscription and samples go with it.
	empty := &discovery.Snapshot{}
	store.SetLive(empty)
	sup.Reconcile(empty)
	require.Empty(t, sup.Subscriptions())
	require.Zero(t, store.Len())
}

// Staleness expiry through the whole path, on the wall clock.
func TestSamplesExpireAfterMaxStaleness(t *testing.T) {
	const worker, pub = 7, 9
	py := pypeer.Start(t, "testdata/kv_metrics_pub.py", "--publisher-id", strconv.Itoa(pub), "--worker-id", strconv.Itoa(worker))
	port := py.Expect(t, "port ")
	counts := &resultCounts{}
	store := load.NewStore(counts.inc)
	store.SetMaxStaleness(300 * time.Millisecond)
	sup := newLoadSupervisor(store, counts)
	defer sup.Stop()
	snap := fleet(worker, pub, "tcp://127.0.0.1:"+port)
	store.SetLive(snap)
	sup.Reconcile(snap)
	py.Expect(t, "subscribed ")
	py.Expect(t, "done")
	k := load.Key{Namespace: "dynamo", WorkerID: worker}
	eventually(t, "the last sample", func() bool { s, ok := store.Latest(k); return ok && s.Sequence == 5 })
	received, _ := store.Latest(k)
	require.Equal(t, load.Fresh, store.StatusOf(k, load.Decode, received.ReceivedAt).Kind)
	require.Equal(t, load.SilentUnderLoad, store.StatusOf(k, load.Decode, received.ReceivedAt.Add(301*time.Millisecond)).Kind,
		"a stale sample that reported a backlog is silent under load")
	_, fresh := store.FreshDefault(k, time.Now().Add(time.Second))
	require.False(t, fresh)
}
