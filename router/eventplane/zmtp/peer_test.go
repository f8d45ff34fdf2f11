package zmtp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
	"unsafe"
)

// This file holds an independent, test-only encoder for what a publisher
// sends, a reader for what a subscriber must send, and raw TCP peers that
// script both — the hostile peers are built from it.

func peerGreeting(major, minor byte, mech string) []byte {
	g := make([]byte, greetingSize)
	g[0], g[9], g[10], g[11] = 0xFF, 0x7F, major, minor
	copy(g[12:32], mech)
	return g
}

func frameHeader(flags byte, size int) []byte {
	if size > 255 {
		h := []byte{flags | 0x02, 0, 0, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint64(h[1:], uint64(size))
		return h
	}
	return []byte{flags, byte(size)}
}

func command(name string, data []byte) []byte {
	body := append([]byte{byte(len(name))}, name...)
	body = append(body, data...)
	return append(frameHeader(0x04, len(body)), body...)
}

func property(name, value string) []byte {
	p := append([]byte{byte(len(name))}, name...)
	p = binary.BigEndian.AppendUint32(p, uint32(len(value)))
	return append(p, value...)
}

func readyCommand(props ...[]byte) []byte {
	return command("READY", bytes.Join(props, nil))
}

// pubHello is what a well-behaved PUB sends: greeting and READY.
func pubHello(minor byte) []byte {
	return append(peerGreeting(3, minor, "NULL"), readyCommand(property("Socket-Type", "PUB"))...)
}

// message encodes a multipart data message.
func message(frames ...[]byte) []byte {
	var out []byte
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = 0x01
		}
		out = append(out, frameHeader(flags, len(f))...)
		out = append(out, f...)
	}
	return out
}

// kvMetrics is a Dynamo-shaped 4-frame message: topic, publisher id,
// sequence, payload.
func kvMetrics(pub, seq uint64, payload []byte) [][]byte {
	return [][]byte{
		[]byte("kv_metrics"),
		binary.BigEndian.AppendUint64(nil, pub),
		binary.BigEndian.AppendUint64(nil, seq),
		payload,
	}
}

// expectSubscriber reads what Handshake must write — greeting 3.0/NULL,
// READY with Socket-Type SUB, and one 0x01+topic frame per topic — and
// compares it with an encoding made independently of the package.
func expectSubscriber(c net.Conn, topics ...string) error {
	want := peerGreeting(3, 0, "NULL")
	want = append(want, readyCommand(property("Socket-Type", "SUB"))...)
	for _, t := range topics {
		want = append(want, message(append([]byte{1}, t...))...)
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("reading subscriber handshake: %w", err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("subscriber handshake\n got %x\nwant %x", got, want)
	}
	return nil
}

// peerDeadline bounds every scripted peer connection.
const peerDeadline = 10 * time.Second

// rawPeer listens on an ephemeral loopback port, accepts one connection and
// runs script on it. It returns the dialed client side and a function that
// waits for the script's result. Both sides are closed at cleanup.
func rawPeer(t testing.TB, script func(c net.Conn) error) (net.Conn, func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		// A client bug must fail the test, not hang it: the peer gives up
		// and closes, which the client sees as EOF.
		_ = c.SetDeadline(time.Now().Add(peerDeadline))
		done <- script(c)
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	var result error
	waited := false
	wait := func() error {
		if !waited {
			select {
			case result = <-done:
			case <-time.After(peerDeadline + time.Second):
				result = errors.New("peer script did not finish")
			}
			waited = true
		}
		return result
	}
	return client, wait
}

// holdOpen keeps a hostile peer's connection open until the client closes
// it, so a refusal cannot be mistaken for an EOF.
func holdOpen(c net.Conn) error {
	_, _ = io.Copy(io.Discard, c)
	return nil
}

// writeThenHold is a peer script: write b, then hold the connection open.
func writeThenHold(b []byte) func(net.Conn) error {
	return func(c net.Conn) error {
		if _, err := c.Write(b); err != nil {
			return err
		}
		return holdOpen(c)
	}
}

// testLimits are small ceilings that keep hostile-peer tests fast.
var testLimits = Limits{
	MaxFrameBytes:       1024,
	MaxFramesPerMessage: 4,
	MaxMessageBytes:     2048,
	MaxCommandBytes:     128,
	HandshakeTimeout:    2 * time.Second,
	MessageTimeout:      2 * time.Second,
}

func wantProtocolError(t *testing.T, err error, contains string) {
	t.Helper()
	if !IsProtocolError(err) {
		t.Fatalf("want a *ProtocolError containing %q, got %v (%T)", contains, err, err)
	}
	if !bytes.Contains([]byte(err.Error()), []byte(contains)) {
		t.Fatalf("protocol error %q does not mention %q", err, contains)
	}
}

// memConn is an in-memory net.Conn for fuzzing and benchmarks: reads return
// head, then body (repeated forever when loop is set), then io.EOF; writes
// are discarded; deadlines are accepted and ignored.
type memConn struct {
	head, body []byte
	loop       bool
	off        int
	inBody     bool
}

func (m *memConn) Read(p []byte) (int, error) {
	src := m.head
	if m.inBody {
		src = m.body
	}
	if m.off == len(src) {
		switch {
		case !m.inBody:
			m.inBody, m.off, src = true, 0, m.body
		case m.loop && len(m.body) > 0:
			m.off = 0
		}
		if m.off == len(src) {
			return 0, io.EOF
		}
	}
	n := copy(p, src[m.off:])
	m.off += n
	return n, nil
}

func (m *memConn) Write(p []byte) (int, error)      { return len(p), nil }
func (m *memConn) Close() error                     { return nil }
func (m *memConn) LocalAddr() net.Addr              { return memAddr{} }
func (m *memConn) RemoteAddr() net.Addr             { return memAddr{} }
func (m *memConn) SetDeadline(time.Time) error      { return nil }
func (m *memConn) SetReadDeadline(time.Time) error  { return nil }
func (m *memConn) SetWriteDeadline(time.Time) error { return nil }

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "mem" }

// sizeofSub is the size of the Sub struct itself, for reporting.
const sizeofSub = int(unsafe.Sizeof(Sub{}))
