package eventplane_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/load"
)

// nullSink takes messages and does nothing with them.
type nullSink struct{}

func (nullSink) Connected(string, uint64, time.Time)         {}
func (nullSink) Deliver(string, uint64, [][]byte, time.Time) {}

func publishers(topic string, from, n int) []*discovery.Publisher {
	var out []*discovery.Publisher
	for i := from; i < from+n; i++ {
		out = append(out, &discovery.Publisher{Namespace: "dynamo", PublisherID: uint64(i), Topic: topic,
			TransportKind: "Zmq", Address: fmt.Sprintf("tcp://127.0.0.1:%d", 20000+i%40000)})
	}
	return out
}

func ids(subs []eventplane.SubscriptionInfo) []uint64 {
	out := make([]uint64, len(subs))
	for i, s := range subs {
		out[i] = s.PublisherID
	}
	return out
}

// Two families reconciled in turn share one MaxSubscriptions budget: the
// first takes what it needs, the second what is left (its lowest ids),
// and gets more as soon as the first needs less.
func TestFamiliesShareOneBudget(t *testing.T) {
	broker := eventplane.Policy{Transport: eventplane.TransportBroker, Dialer: &eventplane.Dialer{}} // nothing dials
	log := slog.New(slog.DiscardHandler)
	loadSup := eventplane.NewSupervisor(eventplane.Family{Topic: discovery.TopicLoad, Limits: envelope.LoadLimits, Sink: nullSink{}},
		broker, clock.Real{}, log, nil)
	defer loadSup.Stop()
	kvSup := eventplane.NewSupervisor(eventplane.Family{Topic: discovery.TopicKVEvents, Limits: envelope.KVEventLimits, Sink: nullSink{}},
		broker, clock.Real{}, log, nil)
	defer kvSup.Stop()

	snap := &discovery.Snapshot{}
	snap.Publishers = append(publishers(discovery.TopicLoad, 1, 1000), publishers(discovery.TopicKVEvents, 5001, 100)...)
	n := loadSup.ReconcileWithin(snap, eventplane.MaxSubscriptions)
	require.Equal(t, 1000, n)
	require.Equal(t, eventplane.MaxSubscriptions-1000, kvSup.ReconcileWithin(snap, eventplane.MaxSubscriptions-n))
	require.Len(t, loadSup.Subscriptions(), 1000)
	kv := kvSup.Subscriptions()
	require.Len(t, kv, eventplane.MaxSubscriptions-1000)
	require.Equal(t, uint64(5001), kv[0].PublisherID)
	require.Equal(t, uint64(5000+eventplane.MaxSubscriptions-1000), kv[len(kv)-1].PublisherID, "the lowest ids are admitted")

	snap = &discovery.Snapshot{}
	snap.Publishers = append(publishers(discovery.TopicLoad, 1, 10), publishers(discovery.TopicKVEvents, 5001, 100)...)
	n = loadSup.ReconcileWithin(snap, eventplane.MaxSubscriptions)
	require.Equal(t, 10, n)
	require.Equal(t, 100, kvSup.ReconcileWithin(snap, eventplane.MaxSubscriptions-n))
	require.Len(t, kvSup.Subscriptions(), 100)

	require.Zero(t, kvSup.ReconcileWithin(snap, -3), "no budget left, no subscription")
	require.Empty(t, kvSup.Subscriptions())
	require.Equal(t, 100, kvSup.ReconcileWithin(snap, 1<<20), "never more than MaxSubscriptions")
	require.Len(t, loadSup.Subscriptions(), 10, "each family follows its own topic only")
	require.Equal(t, ids(loadSup.Subscriptions()), []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
}

// Down is the time a subscription has been without a session since, on
// the supervisor's clock: its start until the first session, zero while a
// session is up, the session's end afterwards.
func TestDownFollowsSessions(t *testing.T) {
	const worker, pid = 11, 21
	addr := freePort(t)
	clk := clock.NewManual(time.Unix(1_700_000_000, 0))
	store := load.NewStore(nil)
	sup := eventplane.NewSupervisor(eventplane.Family{Topic: discovery.TopicLoad, Limits: envelope.LoadLimits,
		Sink: load.Subscriber{Store: store}}, eventplane.Policy{Transport: eventplane.TransportDirect,
		Dialer: &eventplane.Dialer{}}, clk, slog.New(slog.DiscardHandler), nil)
	defer sup.Stop()
	started := clk.Now()

	// Nothing listens yet: the dial fails and the subscription waits out
	// its backoff on the manual clock.
	sup.Reconcile(fleet(worker, pid, "tcp://"+addr))
	eventually(t, "the refused dial", func() bool { return sup.Subscriptions()[0].State == eventplane.Backoff })
	require.True(t, sup.Subscriptions()[0].Down.Equal(started), "down since it started")

	pub := zmq4Pub(t, addr)
	clk.Advance(time.Minute) // past any backoff: it dials again
	eventually(t, "the session", func() bool { return sup.Subscriptions()[0].State == eventplane.Connected })
	require.True(t, sup.Subscriptions()[0].Down.IsZero(), "up")

	clk.Advance(90 * time.Second)
	ended := clk.Now()
	pub.Close()
	eventually(t, "the session to end", func() bool { return sup.Subscriptions()[0].State == eventplane.Backoff })
	require.True(t, sup.Subscriptions()[0].Down.Equal(ended), "down since the session ended: %v", sup.Subscriptions()[0].Down)
}
