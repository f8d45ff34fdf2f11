package eventplane_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/load"
)

// zmq4 serves only as a test PUBLISHER: it must never read from a
// fleet-authored endpoint (it allocates whatever frame size a peer declares).
func zmq4Pub(t *testing.T, addr string) zmq4.Socket {
	t.Helper()
	pub := zmq4.NewPub(context.Background())
	require.NoError(t, pub.Listen("tcp://"+addr))
	t.Cleanup(func() { pub.Close() })
	return pub
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// publishUntil sends load samples until cond holds: a PUB drops what it
// sends before the subscription has reached it.
func publishUntil(t *testing.T, pub zmq4.Socket, pid uint64, first uint64, a wire.ActiveLoad, cond func() bool) uint64 {
	t.Helper()
	seq := first
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "no sample arrived")
		require.NoError(t, pub.Send(zmq4.NewMsgFrom(wire.LoadMessage(pid, seq, a, time.Now())...)))
		seq++
		time.Sleep(10 * time.Millisecond)
	}
	return seq
}

func TestPublisherRestartReconnectsAndDropsHeldSamples(t *testing.T) {
	const worker, pid = 11, 21
	addr := freePort(t)
	pub := zmq4Pub(t, addr)
	counts := &resultCounts{}
	store := load.NewStore(counts.inc)
	sup := newLoadSupervisor(store, counts, "127.0.0.0/8")
	defer sup.Stop()
	snap := fleet(worker, pid, "tcp://"+addr)
	store.SetLive(snap)
	sup.Reconcile(snap)

	k := load.Key{Namespace: "dynamo", WorkerID: worker}
	publishUntil(t, pub, pid, 1, wire.ActiveLoad{WorkerID: worker, KVUsedBlocks: wire.U64(3)}, func() bool {
		_, ok := store.Latest(k)
		return ok
	})

	// The publisher process restarts on the same port: the session ends,
	// the subscription backs off and reconnects, and the sample held from
	// before is dropped on reconnect (a change may have been missed).
	pub.Close()
	eventually(t, "the session to end", func() bool { return sup.Subscriptions()[0].State != eventplane.Connected })
	pub2 := zmq4Pub(t, addr)
	eventually(t, "the reconnect", func() bool { return sup.Subscriptions()[0].State == eventplane.Connected })
	_, ok := store.Latest(k)
	require.False(t, ok, "samples from before the reconnect were dropped")
	// Sequences restart at 1 on the new stream and are accepted.
	publishUntil(t, pub2, pid, 1, wire.ActiveLoad{WorkerID: worker, KVUsedBlocks: wire.U64(4)}, func() bool {
		s, ok := store.Latest(k)
		return ok && s.KVUsedBlocks == 4
	})
}

func TestDialPolicyRefusesAddressesOutsideTheAllowList(t *testing.T) {
	addr := freePort(t)
	zmq4Pub(t, addr)
	counts := &resultCounts{}
	store := load.NewStore(counts.inc)
	sup := newLoadSupervisor(store, counts, "10.0.0.0/8")
	defer sup.Stop()
	sup.Reconcile(fleet(1, 2, "tcp://"+addr))
	eventually(t, "a refused dial", func() bool { return sup.Subscriptions()[0].State == eventplane.Backoff })

	// Widening the allow list restarts the subscription under the new policy.
	allow, _ := eventplane.ParseAllow([]string{"127.0.0.1/32"})
	sup.SetPolicy(eventplane.Policy{Transport: eventplane.TransportDirect, Dialer: &eventplane.Dialer{Allow: allow}})
	eventually(t, "a connection", func() bool { return sup.Subscriptions()[0].State == eventplane.Connected })

	// The broker transport never dials directly: subscriptions wait pending.
	sup.SetPolicy(eventplane.Policy{Transport: eventplane.TransportBroker, Dialer: &eventplane.Dialer{}})
	subs := sup.Subscriptions()
	require.Equal(t, eventplane.TransportBroker, subs[0].Transport)
	eventually(t, "pending", func() bool { return sup.Subscriptions()[0].State == eventplane.Pending })
}

// A peer that completes the handshake and then declares a 1 TiB frame: the
// subscription refuses it without allocating, counts transport_refused, and
// the process lives on.
func TestHostilePeerDeclaringAHugeFrame(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				greeting := make([]byte, 64)
				greeting[0], greeting[9], greeting[10], greeting[11] = 0xff, 0x7f, 3, 0
				copy(greeting[12:], "NULL")
				c.Write(greeting)
				ready := []byte{0x04, 0x00, 5, 'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o', 'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e', 0, 0, 0, 3, 'P', 'U', 'B'}
				ready[1] = byte(len(ready) - 2)
				c.Write(ready)
				huge := make([]byte, 9)
				huge[0] = 0x02 // LONG data frame
				binary.BigEndian.PutUint64(huge[1:], 1<<40)
				c.Write(huge)
				buf := make([]byte, 256)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}(c)
		}
	}()
	counts := &resultCounts{}
	store := load.NewStore(counts.inc)
	sup := newLoadSupervisor(store, counts)
	defer sup.Stop()
	sup.Reconcile(fleet(1, 2, "tcp://"+l.Addr().String()))
	eventually(t, "transport_refused", func() bool { return counts.get(envelope.TransportRefused) >= 1 })
}

// Admission follows ascending publisher id up to the cap, and channels the
// router cannot dial are counted once per key, not once per generation.
func TestAdmissionCapAndSkippedChannels(t *testing.T) {
	counts := &resultCounts{}
	store := load.NewStore(counts.inc)
	sup := newLoadSupervisor(store, counts)
	defer sup.Stop()
	sup.SetPolicy(eventplane.Policy{Transport: eventplane.TransportBroker, Dialer: &eventplane.Dialer{}}) // nothing dials
	snap := &discovery.Snapshot{}
	for i := eventplane.MaxSubscriptions + 10; i > 0; i-- {
		snap.Publishers = append(snap.Publishers, &discovery.Publisher{Namespace: "dynamo", PublisherID: uint64(i),
			Topic: discovery.TopicLoad, TransportKind: "Zmq", Address: fmt.Sprintf("tcp://127.0.0.1:%d", 20000+i)})
	}
	snap.Publishers = append(snap.Publishers,
		&discovery.Publisher{Namespace: "dynamo", PublisherID: 1 << 40, Topic: discovery.TopicLoad, TransportKind: "Nats"},
		&discovery.Publisher{Namespace: "dynamo", PublisherID: 1<<40 + 1, Topic: discovery.TopicLoad, TransportKind: "Zmq", Address: "ipc:///tmp/x"},
		&discovery.Publisher{Namespace: "dynamo", PublisherID: 1<<40 + 2, Topic: discovery.TopicLoad, TransportKind: "Zmq", Address: "tcp://no-port"},
		&discovery.Publisher{Namespace: "dynamo", PublisherID: 1<<40 + 3, Topic: discovery.TopicKVEvents, TransportKind: "Zmq", Address: "tcp://127.0.0.1:1"},
	)
	sup.Reconcile(snap)
	sup.Reconcile(snap) // the same generation again: nothing logged or counted twice
	subs := sup.Subscriptions()
	require.Len(t, subs, eventplane.MaxSubscriptions)
	ids := make([]uint64, len(subs))
	for i, s := range subs {
		ids[i] = s.PublisherID
	}
	require.True(t, slices.IsSorted(ids))
	require.Equal(t, uint64(1), ids[0])
	require.Equal(t, uint64(eventplane.MaxSubscriptions), ids[len(ids)-1], "the highest ids wait outside the cap")
	require.Equal(t, 2, counts.get(envelope.Unsupported), "Nats and a non-tcp scheme")
	require.Equal(t, 1, counts.get(envelope.Malformed), "an endpoint without a port")
}
