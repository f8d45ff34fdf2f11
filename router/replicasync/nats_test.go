package replicasync

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"switchyard/internal/natstest"
	"switchyard/router/active"
	"switchyard/router/replica"
)

// startNATSReplicas starts n replicas syncing through the NATS server at
// url and waits until each is connected and subscribed.
func startNATSReplicas(t *testing.T, n int, silentAfter time.Duration, o Options) []*replicaUnderTest {
	t.Helper()
	o.Transport = TransportNATS
	reps := newReplicas(t, n, silentAfter, o)
	for _, r := range reps {
		r.sync.Start(r.core)
		t.Cleanup(r.sync.Close)
		require.Empty(t, r.sync.Addr(), "no PUB socket over NATS")
	}
	for _, r := range reps {
		eventually(t, "every replica connected to NATS", func() bool { return testutil.ToFloat64(r.m.NATSConnected) == 1 })
	}
	// Every replica hears every other's heartbeats: all subscribed.
	for _, r := range reps {
		eventually(t, "every replica follows every peer", func() bool { return r.core.PeerStats().Peers == n-1 })
	}
	return reps
}

// The three-replica scenario of the ZMQ test, over a real nats-server.
func TestReplicasShareTheirActiveRequestsOverNATS(t *testing.T) {
	srv := natstest.Start(t)
	reps := startNATSReplicas(t, 3, 300*time.Millisecond, Options{NATSURL: srv.URL})
	shareActiveRequests(t, reps)
	for _, r := range reps {
		require.Zero(t, testutil.CollectAndCount(r.m.Refused), "nothing refused")
		require.Zero(t, testutil.ToFloat64(r.m.Dropped.WithLabelValues("slow_consumer")))
	}
}

// The server restarts: both replicas reconnect and resubscribe by
// themselves, and a request routed afterwards reaches the peer.
func TestNATSServerRestartReconnects(t *testing.T) {
	srv := natstest.Start(t)
	reps := startNATSReplicas(t, 2, time.Minute, Options{NATSURL: srv.URL})
	a, b := reps[0], reps[1]

	sel1, ok := a.core.Pick(request(1))
	require.True(t, ok)
	r1 := rank(sel1.Decode.WorkerID)
	eventually(t, "the first request in B's account", func() bool { return b.core.ActiveLoad(r1).Requests == 1 })

	srv.Stop()
	for _, r := range reps {
		eventually(t, "the link seen down", func() bool { return testutil.ToFloat64(r.m.NATSConnected) == 0 })
	}
	srv.Restart()
	for _, r := range reps {
		eventually(t, "the link back up", func() bool {
			return testutil.ToFloat64(r.m.NATSConnected) == 1 && testutil.ToFloat64(r.m.NATSReconnects) >= 1
		})
	}
	// Heartbeats go through again (the resubscription is in place), then
	// a new request arrives.
	heard := b.core.PeerStats().Batches
	eventually(t, "A's heartbeats after the restart", func() bool { return b.core.PeerStats().Batches > heard+1 })
	sel2, ok := a.core.Pick(request(2))
	require.True(t, ok)
	r2 := rank(sel2.Decode.WorkerID)
	want := a.core.ActiveLoad(r2)
	eventually(t, "the second request in B's account", func() bool { return b.core.ActiveLoad(r2) == want })
	require.Equal(t, 1, b.core.PeerStats().Peers, "the same peer, not a new one")
}

// blockingTarget holds the subscription's callback until released, and
// tells the sequence numbers of replica 78's batches (markers).
type blockingTarget struct {
	entered chan struct{}
	release chan struct{}
	markers chan uint64
}

func (bt *blockingTarget) PeerBatch(b replica.Batch, _ time.Time) {
	select {
	case bt.entered <- struct{}{}:
	default:
	}
	<-bt.release
	if b.Replica == 78 {
		bt.markers <- b.Seq
	}
}

// Peers' input is untrusted: a replica whose core does not take batches
// fast enough drops them (counted) and goes on publishing; garbage and
// batches carrying its own id are refused or skipped, never applied.
func TestNATSSlowConsumerIsCountedNotBlocking(t *testing.T) {
	srv := natstest.Start(t)
	m := NewMetrics()
	s, err := New(Options{Transport: TransportNATS, NATSURL: srv.URL, Namespace: "ns", Metrics: m,
		Heartbeat: 20 * time.Millisecond, natsPendingMsgs: 4})
	require.NoError(t, err)
	bt := &blockingTarget{entered: make(chan struct{}, 1), release: make(chan struct{}), markers: make(chan uint64, 4)}
	s.Start(bt)
	t.Cleanup(s.Close)
	released := false
	release := func() {
		if !released {
			released = true
			close(bt.release)
		}
	}
	t.Cleanup(release)

	peer, err := nats.Connect(srv.URL)
	require.NoError(t, err)
	defer peer.Close()
	var p []byte
	for seq := uint64(1); seq <= 64; seq++ {
		ev := replica.Event{Kind: replica.Added, RequestID: seq, Holds: []active.Hold{{Rank: rank(0x21), PrefillTokens: 16}}}
		p, err = replica.Append(p[:0], &replica.Batch{Replica: 77, Seq: seq, Events: []replica.Event{ev}})
		require.NoError(t, err)
		require.NoError(t, peer.Publish(s.Topic(), p))
	}
	require.NoError(t, peer.Flush())
	<-bt.entered
	eventually(t, "batches dropped for a slow consumer, counted", func() bool {
		return testutil.ToFloat64(m.Dropped.WithLabelValues("slow_consumer")) > 0
	})
	// The replica keeps publishing while its consumer is stuck.
	sent := testutil.ToFloat64(m.Batches)
	eventually(t, "heartbeats go on", func() bool { return testutil.ToFloat64(m.Batches) >= sent+3 })
	release()
	marker := func(seq uint64) {
		t.Helper()
		p, err := replica.Append(nil, &replica.Batch{Replica: 78, Seq: seq,
			Events: []replica.Event{{Kind: replica.Ended, RequestID: seq}}})
		require.NoError(t, err)
		require.NoError(t, peer.Publish(s.Topic(), p))
		require.NoError(t, peer.Flush())
		select {
		case got := <-bt.markers:
			require.Equal(t, seq, got)
		case <-time.After(10 * time.Second):
			t.Fatalf("marker %d never arrived (received %v, slow %v)", seq, testutil.ToFloat64(m.Received), testutil.ToFloat64(m.Dropped.WithLabelValues("slow_consumer")))
		}
	}
	eventually(t, "every batch applied or counted as dropped", func() bool {
		return testutil.ToFloat64(m.Received)+testutil.ToFloat64(m.Dropped.WithLabelValues("slow_consumer")) == 64
	})
	marker(1)

	// Garbage is refused by reason; a batch with this replica's own id is
	// skipped. All arrive before the next marker, in order.
	received := testutil.ToFloat64(m.Received)
	require.NoError(t, peer.Publish(s.Topic(), []byte("this is not a replica-sync batch at all")))
	own, err := replica.Append(nil, &replica.Batch{Replica: s.ID(), Seq: 1,
		Events: []replica.Event{{Kind: replica.Ended, RequestID: 9}}})
	require.NoError(t, err)
	require.NoError(t, peer.Publish(s.Topic(), own))
	require.NoError(t, peer.Publish(s.Topic(), make([]byte, replica.MaxBatchBytes+1)))
	marker(2)
	require.EqualValues(t, 1, testutil.ToFloat64(m.Refused.WithLabelValues("magic")))
	require.EqualValues(t, 1, testutil.ToFloat64(m.Refused.WithLabelValues("too_large")))
	require.Equal(t, received+1, testutil.ToFloat64(m.Received), "the marker's event only: the replica's own batch is not applied")
}
