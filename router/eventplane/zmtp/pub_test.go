package zmtp

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"switchyard/router/envelope"
)

// acceptOne listens on loopback and runs AcceptPub on the first
// connection; the PubConn's Run goes on in the background.
func acceptOne(t *testing.T) (addr string, got <-chan *PubConn, runErr <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	pc, errs := make(chan *PubConn, 1), make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			errs <- err
			return
		}
		t.Cleanup(func() { conn.Close() })
		p, err := AcceptPub(conn, envelope.LoadLimits)
		if err != nil {
			errs <- err
			return
		}
		pc <- p
		errs <- p.Run()
	}()
	return ln.Addr().String(), pc, errs
}

func waitTopic(t *testing.T, p *PubConn, topic string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !p.Subscribed([]byte(topic)) {
		if time.Now().After(deadline) {
			t.Fatalf("subscription %q never arrived", topic)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Our SUB reads what our PUB writes, subscriptions filter, and a message
// too large for the SUB's limits is refused by the SUB.
func TestPubToOwnSub(t *testing.T) {
	addr, pcs, _ := acceptOne(t)
	s := dialHandshake(t, addr, "replica.ns")
	p := <-pcs
	waitTopic(t, p, "replica.ns.x")
	if p.Subscribed([]byte("other")) {
		t.Fatal("a topic nobody subscribed to matches")
	}
	big := bytes.Repeat([]byte{7}, 300) // a long frame header
	if err := p.WriteMessage([]byte("replica.ns"), big); err != nil {
		t.Fatal(err)
	}
	msg, err := s.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	if len(msg) != 2 || string(msg[0]) != "replica.ns" || !bytes.Equal(msg[1], big) {
		t.Fatalf("got %q", msg)
	}
}

// An independent ZMTP implementation subscribes to our PUB and reads its
// messages.
func TestZmq4SubscriberReadsOurPub(t *testing.T) {
	addr, pcs, _ := acceptOne(t)
	sub := zmq4.NewSub(context.Background())
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, "replica"); err != nil {
		t.Fatal(err)
	}
	if err := sub.Dial("tcp://" + addr); err != nil {
		t.Fatal(err)
	}
	p := <-pcs
	waitTopic(t, p, "replica")
	if err := p.WriteMessage([]byte("replica"), []byte("batch")); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Frames) != 2 || string(msg.Frames[1]) != "batch" {
		t.Fatalf("got %q", msg.Frames)
	}
}

// A subscriber is held to the same ceilings as a publisher: a PUB peer,
// a subscription past MaxTopicBytes, too many subscriptions and a
// multipart message are protocol errors.
func TestPubRefusesMisbehavingSubscribers(t *testing.T) {
	sub := func(topic []byte) []byte { return message(append([]byte{1}, topic...)) }
	many := []byte{}
	for i := range MaxSubscriptions + 1 {
		many = append(many, sub([]byte{byte('a' + i)})...)
	}
	for _, tc := range []struct {
		name  string
		ready []byte
		after []byte
	}{
		{"a PUB peer", readyCommand(property("Socket-Type", "PUB")), nil},
		{"a long topic", readyCommand(property("Socket-Type", "SUB")), sub(bytes.Repeat([]byte{'t'}, MaxTopicBytes+1))},
		{"too many topics", readyCommand(property("Socket-Type", "SUB")), many},
		{"a multipart message", readyCommand(property("Socket-Type", "SUB")), message([]byte{1}, []byte("x"))},
		{"not a subscription", readyCommand(property("Socket-Type", "SUB")), message([]byte{2, 'x'})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, pcs, errs := acceptOne(t)
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.Write(peerGreeting(3, 1, "NULL"))
			conn.Write(tc.ready)
			conn.Write(tc.after)
			select {
			case <-pcs:
				err = <-errs
			case err = <-errs:
			}
			if !IsProtocolError(err) {
				t.Fatalf("got %v, want a protocol error", err)
			}
		})
	}
}
