package zmtp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"switchyard/router/envelope"
)

func TestHandshakeAcceptsZMTP30And31(t *testing.T) {
	for _, minor := range []byte{0, 1, 2} {
		wantMinor := min(int(minor), 1)
		client, wait := rawPeer(t, func(c net.Conn) error {
			if _, err := c.Write(pubHello(minor)); err != nil {
				return err
			}
			if err := expectSubscriber(c, "kv_metrics"); err != nil {
				return err
			}
			_, err := c.Write(message(kvMetrics(7, 1, []byte("payload"))...))
			return err
		})
		s, err := Handshake(client, [][]byte{[]byte("kv_metrics")}, testLimits)
		if err != nil {
			t.Fatalf("3.%d: %v", minor, err)
		}
		if s.PeerMinor() != wantMinor {
			t.Errorf("3.%d: PeerMinor = %d, want %d", minor, s.PeerMinor(), wantMinor)
		}
		msg, err := s.ReadMessage()
		if err != nil {
			t.Fatalf("3.%d: %v", minor, err)
		}
		if len(msg) != 4 || string(msg[3]) != "payload" {
			t.Fatalf("3.%d: got %q", minor, msg)
		}
		if err := wait(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHandshakeAcceptsXPUBAndExtraProperties(t *testing.T) {
	hello := append(peerGreeting(3, 1, "NULL"), readyCommand(
		property("Identity", ""), property("socket-type", "XPUB"), property("X-Custom", "1"))...)
	client, wait := rawPeer(t, func(c net.Conn) error {
		if _, err := c.Write(hello); err != nil {
			return err
		}
		return expectSubscriber(c, "a", "")
	})
	if _, err := Handshake(client, [][]byte{[]byte("a"), {}}, testLimits); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

func TestHandshakeLongTopic(t *testing.T) {
	topic := bytes.Repeat([]byte("t"), 300) // LONG subscription frame, written in two parts
	client, wait := rawPeer(t, func(c net.Conn) error {
		if _, err := c.Write(pubHello(1)); err != nil {
			return err
		}
		return expectSubscriber(c, string(topic))
	})
	if _, err := Handshake(client, [][]byte{topic}, testLimits); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

func TestHandshakeRefusals(t *testing.T) {
	greet := peerGreeting(3, 1, "NULL")
	ready := func(props ...[]byte) []byte { return append(append([]byte{}, greet...), readyCommand(props...)...) }
	bigReady := ready(property("Socket-Type", "PUB"), property("Pad", string(bytes.Repeat([]byte("x"), 200))))
	cases := []struct {
		name, peer, reason string
	}{
		{"http instead of a greeting", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "bad signature byte"},
		{"garbage", "\x00\x01\x02\x03garbage", "bad signature byte"},
		{"ZMTP 1.0 signature", "\xff\x00\x00\x00\x00\x00\x00\x00\x01\x01", "signature end"},
		{"ZMTP 2.0", "\xff\x00\x00\x00\x00\x00\x00\x00\x01\x7f\x01\x02", "version 1.2"},
		{"version 2", string(peerGreeting(2, 0, "NULL")), "version 2.0"},
		{"PLAIN mechanism", string(peerGreeting(3, 0, "PLAIN")), `mechanism "PLAIN"`},
		{"CURVE mechanism", string(peerGreeting(3, 1, "CURVE")), `mechanism "CURVE"`},
		{"mechanism with trailing garbage", string(peerGreeting(3, 1, "NULL\x00x")), "mechanism"},
		{"socket type REQ", string(ready(property("Socket-Type", "REQ"))), `socket type "REQ"`},
		{"socket type SUB", string(ready(property("Socket-Type", "SUB"))), `socket type "SUB"`},
		{"no socket type", string(ready(property("Identity", "x"))), "no Socket-Type"},
		{"socket type twice", string(ready(property("Socket-Type", "PUB"), property("Socket-Type", "PUB"))), "twice"},
		{"truncated property", string(append(append([]byte{}, greet...), command("READY", []byte{11, 'S', 'o', 'c'})...)), "truncated property"},
		{"value overruns", string(append(append([]byte{}, greet...), command("READY", append(property("Socket-Type", "PUB")[:16], 0xff))...)), "overruns"},
		{"PING before READY", string(append(append([]byte{}, greet...), command("PING", []byte{0, 0})...)), `got command "PING"`},
		{"data before READY", string(append(append([]byte{}, greet...), message([]byte("x"))...)), "expected a READY command"},
		{"ERROR instead of READY", string(append(append([]byte{}, greet...), command("ERROR", append([]byte{6}, "denied"...))...)), `ERROR: "denied"`},
		{"READY over MaxCommandBytes", string(bigReady), "command of"},
		{"empty command name", string(append(append([]byte{}, greet...), 0x04, 1, 0)), "name length"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client, _ := rawPeer(t, writeThenHold([]byte(tc.peer)))
			start := time.Now()
			_, err := Handshake(client, [][]byte{[]byte("kv_metrics")}, testLimits)
			wantProtocolError(t, err, tc.reason)
			if d := time.Since(start); d > time.Second {
				t.Errorf("refusal took %v; it must not wait for the handshake deadline", d)
			}
		})
	}
}

func TestHandshakeTimeouts(t *testing.T) {
	t.Parallel() // waits on real time; runs after the serial (memory) tests
	lim := testLimits
	lim.HandshakeTimeout = 300 * time.Millisecond
	trickle := func(b []byte) func(net.Conn) error {
		return func(c net.Conn) error {
			for i := range b {
				if _, err := c.Write(b[i : i+1]); err != nil {
					return nil // the client gave up, as it should
				}
				time.Sleep(50 * time.Millisecond)
			}
			return holdOpen(c)
		}
	}
	cases := map[string]func(net.Conn) error{
		"silent peer":                 holdOpen,
		"greeting one byte at a time": trickle(pubHello(1)),
		"greeting but no READY":       writeThenHold(peerGreeting(3, 1, "NULL")),
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			client, _ := rawPeer(t, script)
			start := time.Now()
			_, err := Handshake(client, nil, lim)
			d := time.Since(start)
			wantProtocolError(t, err, "handshake not completed within 300ms")
			if d < 250*time.Millisecond || d > 2*time.Second {
				t.Errorf("handshake gave up after %v, want about 300ms", d)
			}
		})
	}
}

func TestHandshakePeerCloses(t *testing.T) {
	client, _ := rawPeer(t, func(c net.Conn) error { return nil })
	_, err := Handshake(client, nil, testLimits)
	if err == nil || IsProtocolError(err) {
		t.Fatalf("want a plain I/O error, got %v", err)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Logf("peer close surfaced as %v", err)
	}
}

func TestHandshakeRejectsInvalidLimits(t *testing.T) {
	bad := []Limits{{}, func() Limits { l := envelope.LoadLimits; l.MaxCommandBytes = 4096; return l }(),
		func() Limits { l := envelope.LoadLimits; l.MessageTimeout = 0; return l }()}
	for _, l := range bad {
		if _, err := Handshake(&memConn{}, nil, l); err == nil || IsProtocolError(err) {
			t.Errorf("limits %+v: want a plain validation error, got %v", l, err)
		}
	}
	for _, l := range []Limits{envelope.LoadLimits, envelope.KVEventLimits} {
		if err := validateLimits(l); err != nil {
			t.Error(err)
		}
	}
}
