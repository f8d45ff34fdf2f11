package eventplane_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"

	"switchyard/router/clock"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
)

// listenSink records what a Listener hands its sink.
type listenSink struct {
	mu     sync.Mutex
	events []string
	topics []string
}

func (s *listenSink) add(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
}

func (s *listenSink) Subscribed(ns string, id uint64, _ time.Time) {
	s.add(fmt.Sprintf("subscribed %s/%d", ns, id))
}
func (s *listenSink) Connected(ns string, id uint64, _ time.Time) {
	s.add(fmt.Sprintf("connected %s/%d", ns, id))
}
func (s *listenSink) Disconnected(ns string, id uint64, _ time.Time) {
	s.add(fmt.Sprintf("disconnected %s/%d", ns, id))
}
func (s *listenSink) Unsubscribed(ns string, id uint64, _ time.Time) {
	s.add(fmt.Sprintf("unsubscribed %s/%d", ns, id))
}

func (s *listenSink) Deliver(ns string, id uint64, frames [][]byte, _ time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, fmt.Sprintf("deliver %s/%d seq=%d", ns, id, binary.BigEndian.Uint64(frames[1])))
	s.topics = append(s.topics, string(frames[0]))
}

func (s *listenSink) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

type listenCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *listenCounts) inc(r string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[r]++
}

func (c *listenCounts) get(r string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[r]
}

// pods resolves 127.0.0.2 and 127.0.0.3 (and 10.0.0.9, which no loopback
// peer may speak for) to workers 2, 3 and 9.
func pods(a netip.Addr) (eventplane.Publisher, bool) {
	switch a.String() {
	case "127.0.0.2":
		return eventplane.Publisher{Namespace: "dynamo", ID: 2}, true
	case "127.0.0.3":
		return eventplane.Publisher{Namespace: "dynamo", ID: 3}, true
	case "10.0.0.9":
		return eventplane.Publisher{Namespace: "dynamo", ID: 9}, true
	}
	return eventplane.Publisher{}, false
}

func startListener(t *testing.T, maxConns int) (*eventplane.Listener, *listenSink, *listenCounts) {
	t.Helper()
	sink, counts := &listenSink{}, &listenCounts{}
	l, err := eventplane.Listen(eventplane.ListenerConfig{Addr: "127.0.0.1:0", Limits: envelope.KVEventLimits, Resolve: pods,
		Sink: sink, Clock: clock.Real{}, Log: slog.New(slog.DiscardHandler), Count: counts.inc, MaxConns: maxConns})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, sink, counts
}

// dialPub is a zmq4 PUB that dials the listener, as llm-d-inference-sim's
// publisher does (zmq4 is its ZMTP implementation too), and waits until
// the listener's subscription to everything has reached it.
func dialPub(t *testing.T, addr string) zmq4.Socket {
	t.Helper()
	pub := zmq4.NewPub(context.Background(), zmq4.WithDialerRetry(10*time.Millisecond))
	require.NoError(t, pub.Dial("tcp://"+addr))
	t.Cleanup(func() { pub.Close() })
	eventually(t, "the PUB to see the subscription", func() bool { return slices.Contains(pub.(zmq4.Topics).Topics(), "") })
	return pub
}

func publish(t *testing.T, pub zmq4.Socket, topic string, seq uint64) {
	t.Helper()
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	require.NoError(t, pub.Send(zmq4.NewMsgFrom([]byte(topic), s[:], []byte{0x90})))
}

// A publisher that dials in is mapped to its Pod by the topic: its
// messages reach the sink under the Pod's worker, one session per worker
// from the first message to the connection's end; topics naming no
// worker, naming a Pod the connection may not speak for, or not of the
// kv@ form are counted and dropped.
func TestListenerMapsTopicsToPods(t *testing.T) {
	l, sink, counts := startListener(t, 0)
	pub := dialPub(t, l.Addr().String())
	publish(t, pub, "kv@127.0.0.2@m", 1)
	publish(t, pub, "kv@127.0.0.9@m", 1) // no such Pod
	publish(t, pub, "kv@10.0.0.9@m", 1)  // a real Pod, but not this loopback peer's
	publish(t, pub, "vllm-events", 1)    // vLLM's free-form default
	publish(t, pub, "kv@127.0.0.3:5557@m", 7)
	publish(t, pub, "kv@127.0.0.2@m", 2)
	eventually(t, "the three good messages", func() bool { return counts.get(eventplane.ListenDelivered) == 3 })
	require.Equal(t, 1, counts.get(eventplane.ListenUnknownPod))
	require.Equal(t, 1, counts.get(eventplane.ListenPeerMismatch))
	require.Equal(t, 1, counts.get(eventplane.ListenMalformedTopic))
	require.Equal(t, 1, counts.get(eventplane.ListenAccepted))
	require.Equal(t, []string{"connected dynamo/2", "deliver dynamo/2 seq=1", "connected dynamo/3", "deliver dynamo/3 seq=7",
		"deliver dynamo/2 seq=2"}, sink.snapshot())

	pub.Close()
	eventually(t, "both sessions to end", func() bool { return len(sink.snapshot()) == 7 })
	require.ElementsMatch(t, []string{"disconnected dynamo/2", "disconnected dynamo/3"}, sink.snapshot()[5:])
	eventually(t, "the connection to be released", func() bool { return l.Conns() == 0 })
}

// A worker keeps its session while any connection delivering for it is
// open: a publisher that reconnects before its old connection is noticed
// gone does not end the new session.
func TestListenerSessionSpansConnections(t *testing.T) {
	l, sink, counts := startListener(t, 0)
	a, b := dialPub(t, l.Addr().String()), dialPub(t, l.Addr().String())
	publish(t, a, "kv@127.0.0.2@m", 1)
	eventually(t, "a's message", func() bool { return counts.get(eventplane.ListenDelivered) == 1 })
	publish(t, b, "kv@127.0.0.2@m", 2)
	eventually(t, "b's message", func() bool { return counts.get(eventplane.ListenDelivered) == 2 })
	a.Close()
	eventually(t, "a's connection to end", func() bool { return l.Conns() == 1 })
	require.Equal(t, []string{"connected dynamo/2", "deliver dynamo/2 seq=1", "deliver dynamo/2 seq=2"}, sink.snapshot())
	b.Close()
	eventually(t, "the session to end", func() bool { return len(sink.snapshot()) == 4 })
	require.Equal(t, "disconnected dynamo/2", sink.snapshot()[3])
}

// Connections past the cap are closed at once and counted; one that does
// not speak ZMTP is counted and closed; neither reaches the sink.
func TestListenerBoundsConnections(t *testing.T) {
	l, sink, counts := startListener(t, 1)
	held, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer held.Close()
	eventually(t, "the first connection to be accepted", func() bool { return counts.get(eventplane.ListenAccepted) == 1 })

	over, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer over.Close()
	require.NoError(t, over.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = over.Read(make([]byte, 1))
	require.Error(t, err, "a connection past the cap is closed")
	require.Equal(t, 1, counts.get(eventplane.ListenOverCapacity))

	_, err = held.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	require.NoError(t, err)
	eventually(t, "the bad handshake to be counted", func() bool { return counts.get(eventplane.ListenHandshakeError) == 1 })
	eventually(t, "its slot to be released", func() bool { return l.Conns() == 0 })
	dialPub(t, l.Addr().String()) // the slot is free again
	require.Empty(t, sink.snapshot())
}
