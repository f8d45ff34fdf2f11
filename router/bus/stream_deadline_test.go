package bus

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"switchyard/router/bus/wire"
	"switchyard/router/eventplane"
)

// openEcho opens a relayed stream whose client echoes what the router
// writes.
func openEcho(t *testing.T) net.Conn {
	t.Helper()
	p := newPKI(t)
	l, addr := startListener(t, testSettings(p, brokerEntry("broker-a", "tok-a", "dynamo")))
	c := newClient(t, p, addr, "tok-a")
	_, s := c.open(brokerHello("broker-a", "dynamo"))
	type opened struct {
		conn net.Conn
		err  error
	}
	res := make(chan opened, 1)
	go func() {
		conn, err := l.OpenStream(context.Background(), eventplane.BusTarget{Namespace: "dynamo", Host: "10.0.0.7", Port: 5557})
		res <- opened{conn, err}
	}()
	sub := s.next(t)
	if sub.Type != wire.TypeSubscribe {
		t.Fatalf("want subscribe, got %+v", sub)
	}
	if resp, err := c.echoStream(sub.StreamID); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("data stream: %v %v", resp, err)
	}
	o := <-res
	if o.err != nil {
		t.Fatal(o.err)
	}
	t.Cleanup(func() { o.conn.Close() })
	return o.conn
}

// A read deadline moved forward before it passes never fires; one left
// to pass ends the blocked read with os.ErrDeadlineExceeded, as a TCP
// connection's would.
func TestStreamReadDeadline(t *testing.T) {
	conn := openEcho(t)
	const d = 300 * time.Millisecond
	for i := 0; i < 6; i++ {
		if err := conn.SetReadDeadline(time.Now().Add(d)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(d / 3)
	}
	if err := conn.SetReadDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d) // every earlier deadline has passed by now
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "ping" {
		t.Fatalf("read after moved deadlines: %q %v", got, err)
	}
	// Cleared, then set and left to pass while a read blocks.
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := conn.SetReadDeadline(start.Add(d)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 16))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("want os.ErrDeadlineExceeded, got %v", err)
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%v is not a timeout", err)
		}
		if elapsed := time.Since(start); elapsed < d {
			t.Fatalf("the read ended after %v, before the deadline", elapsed)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the read deadline did not end the read")
	}
}
