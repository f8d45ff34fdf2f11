package zmtp

import (
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// fuzzLimits are small so that the fuzzer reaches every ceiling quickly.
var fuzzLimits = Limits{
	MaxFrameBytes:       3000, // above the read buffer: exercises direct reads
	MaxFramesPerMessage: 4,
	MaxMessageBytes:     4000,
	MaxCommandBytes:     100,
	HandshakeTimeout:    testLimits.HandshakeTimeout,
	MessageTimeout:      testLimits.MessageTimeout,
}

func fuzzSeeds() [][]byte {
	big := make([]byte, 2500)
	return [][]byte{
		message(kvMetrics(1, 1, []byte("payload"))...),
		append(message(kvMetrics(1, 1, big)...), message([]byte("x"), big, big[:1000])...),
		command("PING", []byte{0, 10, 'c', 't', 'x'}),
		append(command("X", nil), command("ERROR", []byte{2, 'n', 'o'})...),
		binary.BigEndian.AppendUint64([]byte{0x02}, 1<<40),
		binary.BigEndian.AppendUint64([]byte{0x06}, 1<<63),
		{0x01, 0x00, 0x01, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x00},
		{0x05, 0x00},
		{0xFF},
	}
}

// checkSession reads messages until the session ends and checks that every
// message, and the memory behind it, stays within the limits, and that the
// session ends with a protocol error or a clean/unclean EOF.
func checkSession(t *testing.T, s *Sub, lim Limits) {
	for {
		msg, err := s.ReadMessage()
		if len(s.arena) > lim.MaxMessageBytes || cap(s.arena) > lim.MaxMessageBytes {
			t.Fatalf("arena of %d bytes exceeds MaxMessageBytes %d", cap(s.arena), lim.MaxMessageBytes)
		}
		if cap(s.out) > lim.MaxFramesPerMessage {
			t.Fatalf("result slice of cap %d exceeds MaxFramesPerMessage", cap(s.out))
		}
		if err != nil {
			if !IsProtocolError(err) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("session ended with %v (%T)", err, err)
			}
			return
		}
		if len(msg) == 0 || len(msg) > lim.MaxFramesPerMessage {
			t.Fatalf("message of %d frames", len(msg))
		}
		total := 0
		for _, f := range msg {
			if len(f) > lim.MaxFrameBytes {
				t.Fatalf("frame of %d bytes", len(f))
			}
			total += len(f)
		}
		if total > lim.MaxMessageBytes {
			t.Fatalf("message of %d bytes", total)
		}
	}
}

// FuzzReadMessage feeds arbitrary bytes after a valid handshake.
func FuzzReadMessage(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		conn := &memConn{head: pubHello(1), body: data}
		s, err := Handshake(conn, [][]byte{[]byte("kv_metrics")}, fuzzLimits)
		if err != nil {
			t.Fatalf("valid handshake refused: %v", err)
		}
		checkSession(t, s, fuzzLimits)
	})
}

// FuzzHandshake feeds an arbitrary peer greeting and READY (and whatever
// follows them).
func FuzzHandshake(f *testing.F) {
	f.Add(pubHello(0))
	f.Add(pubHello(1))
	f.Add(append(pubHello(1), message(kvMetrics(1, 1, nil)...)...))
	f.Add(append(peerGreeting(3, 1, "NULL"), readyCommand(property("Socket-Type", "REQ"))...))
	f.Add(append(peerGreeting(3, 1, "NULL"), command("ERROR", []byte{1, '!'})...))
	f.Add(peerGreeting(2, 0, "NULL"))
	f.Add(peerGreeting(3, 0, "CURVE"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, peer []byte) {
		s, err := Handshake(&memConn{head: peer}, [][]byte{[]byte("kv_metrics"), nil}, fuzzLimits)
		if err != nil {
			if !IsProtocolError(err) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("handshake ended with %v (%T)", err, err)
			}
			return
		}
		if m := s.PeerMinor(); m != 0 && m != 1 {
			t.Fatalf("PeerMinor %d", m)
		}
		checkSession(t, s, fuzzLimits)
	})
}

// FuzzDealer feeds an arbitrary ROUTER handshake and replies to a DEALER
// that has sent a replay request.
func FuzzDealer(f *testing.F) {
	f.Add(routerHello(1))
	f.Add(append(routerHello(0), message(replyFrames(3, []byte("p"))...)...))
	f.Add(append(routerHello(1), message(replyFrames(-1, nil)...)...))
	f.Add(pubHello(1))
	for _, s := range fuzzSeeds() {
		f.Add(append(routerHello(1), s...))
	}
	f.Fuzz(func(t *testing.T, peer []byte) {
		d, err := HandshakeDealer(&memConn{head: peer}, fuzzLimits)
		if err != nil {
			if !IsProtocolError(err) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("handshake ended with %v (%T)", err, err)
			}
			return
		}
		if err := d.Send([]byte{}, make([]byte, 8)); err != nil {
			t.Fatalf("send: %v", err)
		}
		checkSession(t, &d.s, fuzzLimits)
	})
}
