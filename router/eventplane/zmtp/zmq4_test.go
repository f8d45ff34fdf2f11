package zmtp

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"switchyard/router/envelope"
)

// zmq4 is used here only as a publisher: it is a real, independent ZMTP
// implementation (the one the fake fleet publishes with), but it must never
// read from a fleet-authored endpoint itself.

func startZmq4Pub(t *testing.T, endpoint string) zmq4.Socket {
	t.Helper()
	pub := zmq4.NewPub(context.Background())
	if err := pub.Listen(endpoint); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return pub
}

// waitSubscribed polls until the PUB has applied the subscription: zmq4
// drops messages sent before it knows the topic, as every PUB does.
func waitSubscribed(t *testing.T, pub zmq4.Socket, topic string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(pub.(zmq4.Topics).Topics(), topic) {
		if time.Now().After(deadline) {
			t.Fatalf("zmq4 PUB never saw subscription %q", topic)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func dialHandshake(t *testing.T, addr string, topics ...string) *Sub {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var ts [][]byte
	for _, tp := range topics {
		ts = append(ts, []byte(tp))
	}
	s, err := Handshake(conn, ts, envelope.LoadLimits)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestZmq4PublisherInterop(t *testing.T) {
	pub := startZmq4Pub(t, "tcp://127.0.0.1:0")
	s := dialHandshake(t, pub.Addr().String(), "kv_metrics")
	if s.PeerMinor() != 0 {
		t.Errorf("zmq4 speaks ZMTP 3.0, PeerMinor = %d", s.PeerMinor())
	}
	waitSubscribed(t, pub, "kv_metrics")

	const n = 2000
	payload := func(seq uint64) []byte {
		return bytes.Repeat([]byte{byte(seq)}, 150+int(seq%100))
	}
	go func() {
		for seq := uint64(1); seq <= n; seq++ {
			// Another topic first: PUB filters by prefix, so it must never arrive.
			_ = pub.Send(zmq4.NewMsgFrom([]byte("kv-events"), []byte("not for us")))
			_ = pub.Send(zmq4.NewMsgFrom(kvMetrics(42, seq, payload(seq))...))
		}
	}()
	for seq := uint64(1); seq <= n; seq++ {
		msg, err := s.ReadMessage()
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		want := kvMetrics(42, seq, payload(seq))
		if len(msg) != 4 {
			t.Fatalf("message %d: %d frames %q", seq, len(msg), msg)
		}
		for i := range want {
			if !bytes.Equal(msg[i], want[i]) {
				t.Fatalf("message %d frame %d: got %q want %q", seq, i, msg[i], want[i])
			}
		}
	}
}

func TestZmq4PublisherRestart(t *testing.T) {
	pub := startZmq4Pub(t, "tcp://127.0.0.1:0")
	addr := pub.Addr().String()
	s := dialHandshake(t, addr, "kv_metrics")
	waitSubscribed(t, pub, "kv_metrics")
	if err := pub.Send(zmq4.NewMsgFrom(kvMetrics(1, 1, []byte("first life"))...)); err != nil {
		t.Fatal(err)
	}
	if msg, err := s.ReadMessage(); err != nil || string(msg[3]) != "first life" {
		t.Fatalf("%q, %v", msg, err)
	}

	pub.Close()
	_, err := s.ReadMessage()
	if err == nil || IsProtocolError(err) {
		t.Fatalf("after the publisher closed: %v, want a plain I/O error", err)
	}
	t.Logf("publisher close surfaced as: %v", err)

	// A new publisher on the same port; the caller reconnects with a fresh
	// connection and handshake.
	var pub2 zmq4.Socket
	deadline := time.Now().Add(5 * time.Second)
	for {
		pub2 = zmq4.NewPub(context.Background())
		err := pub2.Listen("tcp://" + addr)
		if err == nil {
			break
		}
		pub2.Close()
		if time.Now().After(deadline) {
			t.Fatalf("rebinding %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() { pub2.Close() })
	s2 := dialHandshake(t, addr, "kv_metrics")
	waitSubscribed(t, pub2, "kv_metrics")
	if err := pub2.Send(zmq4.NewMsgFrom(kvMetrics(2, 1, []byte("second life"))...)); err != nil {
		t.Fatal(err)
	}
	msg, err := s2.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.BigEndian.Uint64(msg[1]); got != 2 || string(msg[3]) != "second life" {
		t.Fatalf("publisher %d, %q", got, msg[3])
	}
	if _, err := s.ReadMessage(); err == nil {
		t.Fatal("the old Sub must stay finished")
	}
}
