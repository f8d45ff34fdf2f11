package zmtp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"switchyard/router/envelope"
)

// handshaken returns a Sub whose raw peer completed the handshake and then
// runs script.
func handshaken(t *testing.T, lim Limits, script func(c net.Conn) error) (*Sub, func() error) {
	t.Helper()
	client, wait := rawPeer(t, func(c net.Conn) error {
		if _, err := c.Write(pubHello(1)); err != nil {
			return err
		}
		if err := expectSubscriber(c, "kv_metrics"); err != nil {
			return err
		}
		return script(c)
	})
	s, err := Handshake(client, [][]byte{[]byte("kv_metrics")}, lim)
	if err != nil {
		t.Fatal(err)
	}
	return s, wait
}

func TestReadMessagesByteExact(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 640) // 10 KiB: larger than the read buffer
	msgs := [][][]byte{
		kvMetrics(1, 1, []byte("small")),
		{[]byte("kv_metrics"), {}, big[:300], big[:5000]}, // empty frame; arena grows mid-message
		kvMetrics(1, 2, big),
		{[]byte("kv_metrics")},
		kvMetrics(1, 3, bytes.Repeat([]byte{0xAB}, 255)),
		kvMetrics(1, 4, bytes.Repeat([]byte{0xCD}, 256)),
	}
	lim := testLimits
	lim.MaxFrameBytes, lim.MaxMessageBytes = 16<<10, 32<<10
	s, wait := handshaken(t, lim, func(c net.Conn) error {
		var all []byte
		for _, m := range msgs {
			all = append(all, message(m...)...)
		}
		_, err := c.Write(all)
		return err
	})
	for i, want := range msgs {
		got, err := s.ReadMessage()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if len(got) != len(want) {
			t.Fatalf("message %d: %d frames, want %d", i, len(got), len(want))
		}
		for j := range want {
			if !bytes.Equal(got[j], want[j]) {
				t.Fatalf("message %d frame %d differs (len %d, want %d)", i, j, len(got[j]), len(want[j]))
			}
			if got[j] == nil {
				t.Fatalf("message %d frame %d is nil", i, j)
			}
		}
	}
	if _, err := s.ReadMessage(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the peer closed: %v, want io.EOF", err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

func TestReadRefusesHostileFrames(t *testing.T) {
	long := func(flags byte, size uint64) []byte {
		return binary.BigEndian.AppendUint64([]byte{flags | 0x02}, size)
	}
	kb := bytes.Repeat([]byte("k"), 1000)
	cases := []struct {
		name   string
		peer   []byte
		reason string
	}{
		{"1 TiB frame", long(0, 1<<40), "frame of 1099511627776 bytes exceeds 1024"},
		{"2^64-1 frame", long(0, ^uint64(0)), "exceeds 1024"},
		{"frame one over MaxFrameBytes", long(0, 1025), "frame of 1025 bytes exceeds 1024"},
		{"later frame over MaxFrameBytes", append(message([]byte("a"), []byte("b"))[:3], long(0, 5000)...), "exceeds 1024"},
		{"too many frames", message([]byte("1"), []byte("2"), []byte("3"), []byte("4"), []byte("5")), "more than 4 frames"},
		{"message over MaxMessageBytes", message(kb, kb, kb), "message of more than 3000 bytes exceeds 2048"},
		{"command over MaxCommandBytes", command("PING", make([]byte, 200)), "command of 205 bytes exceeds 128"},
		{"1 TiB command", long(0x04, 1<<40), "command of 1099511627776 bytes"},
		{"command inside a message", append(frameHeader(0x01, 1), append([]byte("x"), command("PING", []byte{0, 0})...)...), "command frame inside a multipart message"},
		{"reserved flag bits", []byte{0x08, 1, 'x'}, "reserved bits"},
		{"reserved bits in a later frame", append(message([]byte("a"), []byte("b"))[:3], 0x10, 1, 'b'), "reserved bits"},
		{"command with MORE", []byte{0x05, 6, 4, 'P', 'I', 'N', 'G', 0}, "MORE"},
		{"ERROR command", command("ERROR", append([]byte{4}, "bye!"...)), `peer sent ERROR: "bye!"`},
		{"READY again", readyCommand(property("Socket-Type", "PUB")), "READY after the handshake"},
		{"PING context over 16 bytes", command("PING", append([]byte{0, 10}, make([]byte, 17)...)), "PING context of 17 bytes"},
		{"PING without TTL", command("PING", []byte{0}), "PING without a TTL"},
		{"empty command", []byte{0x04, 0}, "empty command"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := handshaken(t, testLimits, writeThenHold(tc.peer))
			_, err := s.ReadMessage()
			wantProtocolError(t, err, tc.reason)
			if _, again := s.ReadMessage(); again != err {
				t.Fatalf("error is not sticky: %v then %v", err, again)
			}
		})
	}
}

// A declared 1 TiB frame is refused from its header alone: nothing close to
// the declared size is allocated or awaited.
func TestOneTebibyteFrameAllocatesNothingBig(t *testing.T) {
	sent := make(chan struct{})
	s, _ := handshaken(t, envelope.LoadLimits, func(c net.Conn) error {
		if _, err := c.Write(binary.BigEndian.AppendUint64([]byte{0x02}, 1<<40)); err != nil {
			return err
		}
		close(sent)
		return holdOpen(c)
	})
	<-sent
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := s.ReadMessage()
	runtime.ReadMemStats(&after)
	wantProtocolError(t, err, "frame of 1099511627776 bytes exceeds 65536")
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 64<<10 {
		t.Fatalf("refusing a 1 TiB header allocated %d bytes", grown)
	}
	if s.arena != nil {
		t.Fatalf("arena of %d bytes allocated for a refused frame", len(s.arena))
	}
}

func TestPingIsAnsweredWithPong(t *testing.T) {
	s, wait := handshaken(t, testLimits, func(c net.Conn) error {
		ctx := []byte("ctx-0123456789ab") // 16 bytes, the most allowed
		if _, err := c.Write(command("PING", append([]byte{0, 30}, ctx...))); err != nil {
			return err
		}
		want := command("PONG", ctx)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(c, got); err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("PONG %x, want %x", got, want)
		}
		// An empty context is echoed as an empty PONG.
		if _, err := c.Write(command("PING", []byte{0, 0})); err != nil {
			return err
		}
		want = command("PONG", nil)
		got = got[:len(want)]
		if _, err := io.ReadFull(c, got); err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("PONG %x, want %x", got, want)
		}
		_, err := c.Write(message(kvMetrics(1, 1, []byte("after ping"))...))
		return err
	})
	msg, err := s.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	if string(msg[3]) != "after ping" {
		t.Fatalf("got %q", msg)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

func TestUnknownCommandsAreSkipped(t *testing.T) {
	s, _ := handshaken(t, testLimits, func(c net.Conn) error {
		var b []byte
		b = append(b, command("PONG", []byte("x"))...)
		b = append(b, command("SUBSCRIBE", []byte("topic"))...)
		b = append(b, command("X-FUTURE", bytes.Repeat([]byte("z"), 100))...)
		b = append(b, message(kvMetrics(1, 1, []byte("after commands"))...)...)
		_, err := c.Write(b)
		return err
	})
	msg, err := s.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	if string(msg[3]) != "after commands" {
		t.Fatalf("got %q", msg)
	}
}

func TestMessageTimeout(t *testing.T) {
	t.Parallel() // waits on real time; runs after the serial (memory) tests
	lim := testLimits
	lim.MessageTimeout = 300 * time.Millisecond
	t.Run("trickled message", func(t *testing.T) {
		s, _ := handshaken(t, lim, func(c net.Conn) error {
			m := message(kvMetrics(1, 1, bytes.Repeat([]byte("p"), 100))...)
			for i := range m {
				if _, err := c.Write(m[i : i+1]); err != nil {
					return nil
				}
				time.Sleep(50 * time.Millisecond)
			}
			return holdOpen(c)
		})
		start := time.Now()
		_, err := s.ReadMessage()
		d := time.Since(start)
		wantProtocolError(t, err, "message not completed within 300ms")
		if d < 250*time.Millisecond || d > 2*time.Second {
			t.Errorf("gave up after %v, want about 300ms", d)
		}
	})
	t.Run("trickled command", func(t *testing.T) {
		s, _ := handshaken(t, lim, func(c net.Conn) error {
			if _, err := c.Write(command("PING", []byte{0, 1})[:3]); err != nil {
				return err
			}
			return holdOpen(c)
		})
		_, err := s.ReadMessage()
		wantProtocolError(t, err, "message not completed")
	})
}

// Publishers are silent while nothing changes: waiting for a message has no
// deadline, only a message in progress does.
func TestIdleHasNoDeadline(t *testing.T) {
	t.Parallel() // waits on real time; runs after the serial (memory) tests
	lim := testLimits
	lim.MessageTimeout = 150 * time.Millisecond
	s, wait := handshaken(t, lim, func(c net.Conn) error {
		for seq := uint64(1); seq <= 3; seq++ {
			time.Sleep(400 * time.Millisecond)
			if _, err := c.Write(message(kvMetrics(1, seq, nil)...)); err != nil {
				return err
			}
		}
		return nil
	})
	for seq := uint64(1); seq <= 3; seq++ {
		msg, err := s.ReadMessage()
		if err != nil {
			t.Fatalf("message %d after an idle gap: %v", seq, err)
		}
		if got := binary.BigEndian.Uint64(msg[2]); got != seq {
			t.Fatalf("seq %d, want %d", got, seq)
		}
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

func TestEOFInsideAMessageIsUnexpected(t *testing.T) {
	for name, tail := range map[string][]byte{
		"inside a frame":   message(kvMetrics(1, 1, []byte("payload"))...)[:20],
		"between frames":   message(kvMetrics(1, 1, []byte("payload"))...)[:12],
		"inside a header":  {0x02, 0, 0},
		"inside a command": command("PING", []byte{0, 0})[:4],
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := handshaken(t, testLimits, func(c net.Conn) error {
				_, err := c.Write(tail)
				return err
			})
			_, err := s.ReadMessage()
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
			}
		})
	}
}

func TestCloseUnblocksIdleRead(t *testing.T) {
	t.Parallel() // waits on real time; runs after the serial (memory) tests
	client, _ := rawPeer(t, func(c net.Conn) error {
		if _, err := c.Write(pubHello(1)); err != nil {
			return err
		}
		return holdOpen(c)
	})
	s, err := Handshake(client, nil, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		client.Close()
	}()
	_, err = s.ReadMessage()
	if !errors.Is(err, net.ErrClosed) || IsProtocolError(err) {
		t.Fatalf("got %v, want net.ErrClosed", err)
	}
}

// The arena never exceeds MaxMessageBytes, and one burst of large messages
// does not pin its memory once messages are small again.
func TestArenaIsBoundedAndShrinks(t *testing.T) {
	lim := envelope.LoadLimits
	big := bytes.Repeat([]byte("b"), 60<<10)
	s, _ := handshaken(t, lim, func(c net.Conn) error {
		b := message([]byte("kv_metrics"), big, big)
		for i := 0; i < shrinkAfter+1; i++ {
			b = append(b, message(kvMetrics(1, uint64(i), []byte("small"))...)...)
		}
		_, err := c.Write(b)
		return err
	})
	if _, err := s.ReadMessage(); err != nil {
		t.Fatal(err)
	}
	if n := len(s.arena); n > lim.MaxMessageBytes || n < 2*len(big) {
		t.Fatalf("arena %d bytes after a %d-byte message (ceiling %d)", n, 2*len(big)+10, lim.MaxMessageBytes)
	}
	for i := 0; i < shrinkAfter; i++ {
		if _, err := s.ReadMessage(); err != nil {
			t.Fatal(err)
		}
	}
	if s.arena != nil {
		t.Fatalf("arena of %d bytes still held after %d small messages", len(s.arena), shrinkAfter)
	}
	if msg, err := s.ReadMessage(); err != nil || string(msg[3]) != "small" {
		t.Fatalf("after shrinking: %q, %v", msg, err)
	}
	if len(s.arena) != minArena {
		t.Fatalf("arena regrown to %d, want %d", len(s.arena), minArena)
	}
}
