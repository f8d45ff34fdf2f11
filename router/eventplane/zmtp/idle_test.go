package zmtp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// A silent peer makes ReadMessageOrIdle return ErrIdle without ending the
// Sub; PING is answered, released buffers come back, and a clean close
// after all that is still io.EOF.
func TestReadMessageOrIdle(t *testing.T) {
	t.Parallel() // waits on real time; runs after the serial (memory) tests
	step := make(chan struct{})
	s, wait := handshaken(t, testLimits, func(c net.Conn) error {
		<-step // the client saw ErrIdle
		ctx := []byte("idle")
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
		<-step // the client saw ErrIdle again, after the PING
		if _, err := c.Write(message(kvMetrics(1, 1, []byte("first"))...)); err != nil {
			return err
		}
		<-step // the client released its buffers
		if _, err := c.Write(message(kvMetrics(1, 2, []byte("second"))...)); err != nil {
			return err
		}
		return nil // closes: a clean end between messages
	})
	const idle = 100 * time.Millisecond
	if _, err := s.ReadMessageOrIdle(idle); err != ErrIdle {
		t.Fatalf("silent peer: %v, want ErrIdle", err)
	}
	step <- struct{}{}
	// The PING is answered and the wait for a message starts again.
	if _, err := s.ReadMessageOrIdle(idle); err != ErrIdle {
		t.Fatalf("after PING: %v, want ErrIdle", err)
	}
	step <- struct{}{}
	msg, err := readUntilMessage(s, idle)
	if err != nil || string(msg[3]) != "first" {
		t.Fatalf("first message: %q, %v", msg, err)
	}
	if !s.ReleaseBuffers() || s.r.buf != nil || s.arena != nil {
		t.Fatal("an idle Sub kept its buffers")
	}
	step <- struct{}{}
	msg, err = readUntilMessage(s, idle)
	if err != nil || string(msg[3]) != "second" {
		t.Fatalf("second message after release: %q, %v", msg, err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := readUntilMessage(s, idle); !errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("clean close: %v, want io.EOF", err)
	}
	if _, err := s.ReadMessageOrIdle(idle); !errors.Is(err, io.EOF) {
		t.Fatalf("after the end: %v, want the same io.EOF", err)
	}
}

// readUntilMessage reads past idle waits, as a parked caller woken early
// would.
func readUntilMessage(s *Sub, idle time.Duration) ([][]byte, error) {
	deadline := time.Now().Add(peerDeadline)
	for time.Now().Before(deadline) {
		msg, err := s.ReadMessageOrIdle(idle)
		if err != ErrIdle {
			return msg, err
		}
	}
	return nil, errors.New("no message before the peer's deadline")
}

// The idle wait covers only the start of a message: one begun and then
// trickled still ends the Sub after MessageTimeout, however long the idle
// wait is.
func TestReadMessageOrIdleKeepsMessageTimeout(t *testing.T) {
	t.Parallel() // waits on real time; runs after the serial (memory) tests
	lim := testLimits
	lim.MessageTimeout = 300 * time.Millisecond
	s, _ := handshaken(t, lim, func(c net.Conn) error {
		m := message(kvMetrics(1, 1, []byte("slow"))...)
		if _, err := c.Write(m[:3]); err != nil {
			return err
		}
		return holdOpen(c)
	})
	_, err := s.ReadMessageOrIdle(time.Hour)
	wantProtocolError(t, err, "message not completed within 300ms")
	if _, again := s.ReadMessageOrIdle(time.Hour); again != err {
		t.Fatalf("after the timeout: %v, want the same error", again)
	}
}

// A buffered message is never released: the next read returns it.
func TestReleaseBuffersKeepsBufferedBytes(t *testing.T) {
	var body []byte
	body = append(body, message(kvMetrics(1, 1, []byte("a"))...)...)
	body = append(body, message(kvMetrics(1, 2, []byte("b"))...)...)
	s, err := Handshake(&memConn{head: pubHello(1), body: body}, [][]byte{[]byte("kv_metrics")}, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	if msg, err := s.ReadMessageOrIdle(time.Second); err != nil || string(msg[3]) != "a" {
		t.Fatalf("%q, %v", msg, err)
	}
	if s.ReleaseBuffers() {
		t.Fatal("released a buffer holding the next message")
	}
	if msg, err := s.ReadMessageOrIdle(time.Second); err != nil || string(msg[3]) != "b" {
		t.Fatalf("%q, %v", msg, err)
	}
}

// FuzzReadMessageOrIdle feeds arbitrary bytes after a valid handshake and
// reads them as a parking caller does, releasing the buffers whenever it
// may: every ceiling holds and the session ends cleanly or refused.
func FuzzReadMessageOrIdle(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Handshake(&memConn{head: pubHello(1), body: data}, [][]byte{[]byte("kv_metrics")}, fuzzLimits)
		if err != nil {
			t.Fatalf("valid handshake refused: %v", err)
		}
		for {
			msg, err := s.ReadMessageOrIdle(time.Minute)
			if cap(s.arena) > fuzzLimits.MaxMessageBytes || cap(s.out) > fuzzLimits.MaxFramesPerMessage {
				t.Fatalf("arena %d, result slice %d above the limits", cap(s.arena), cap(s.out))
			}
			if err != nil {
				if !IsProtocolError(err) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("session ended with %v (%T)", err, err)
				}
				return
			}
			total := 0
			for _, fr := range msg {
				total += len(fr)
			}
			if len(msg) == 0 || len(msg) > fuzzLimits.MaxFramesPerMessage || total > fuzzLimits.MaxMessageBytes {
				t.Fatalf("message of %d frames, %d bytes", len(msg), total)
			}
			s.ReleaseBuffers()
		}
	})
}
