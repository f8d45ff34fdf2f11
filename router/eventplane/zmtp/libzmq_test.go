package zmtp

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net"
	"strconv"
	"testing"

	"switchyard/internal/pypeer"
	"switchyard/internal/syncbuf"
	"switchyard/router/envelope"
)

// libzmq, driven through Debian's python3-zmq (internal/pypeer), is the
// independent ZMTP implementation these tests interoperate with. It is a
// required test dependency: a missing one fails the test instead of skipping
// it, so that interop is never silently untested.

const pyPublisherID = 0x5157495443485944

// pyPayload mirrors payload() in testdata/pub.py.
func pyPayload(seq uint64) []byte {
	p := make([]byte, 180+seq%64)
	for i := range p {
		p[i] = byte((seq + uint64(i)) % 251)
	}
	return p
}

func startPyPub(t *testing.T, args ...string) (*pypeer.Peer, string) {
	t.Helper()
	p := pypeer.Start(t, append([]string{"testdata/pub.py"}, args...)...)
	port := p.Expect(t, "port ")
	if _, err := strconv.Atoi(port); err != nil {
		t.Fatalf("pub.py printed port %q", port)
	}
	return p, "127.0.0.1:" + port
}

// recordingConn keeps a copy of everything the Sub writes, so a test can see
// the PONGs it sent.
type recordingConn struct {
	net.Conn
	out syncbuf.Buffer
}

func (c *recordingConn) Write(b []byte) (int, error) {
	c.out.Write(b)
	return c.Conn.Write(b)
}

func (c *recordingConn) written() []byte { return c.out.Bytes() }

type libzmqRun struct {
	mode        string
	count       int
	gapMs, hbMs int
}

func (r libzmqRun) run(t *testing.T) *recordingConn {
	p, addr := startPyPub(t, "--mode", r.mode, "--count", strconv.Itoa(r.count),
		"--gap-ms", strconv.Itoa(r.gapMs), "--heartbeat-ms", strconv.Itoa(r.hbMs))
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	conn := &recordingConn{Conn: raw}
	s, err := Handshake(conn, [][]byte{[]byte("kv_metrics")}, envelope.LoadLimits)
	if err != nil {
		t.Fatal(err)
	}
	if s.PeerMinor() != 1 {
		t.Errorf("libzmq 4.3 speaks ZMTP 3.1, PeerMinor = %d", s.PeerMinor())
	}
	if r.mode == "xpub" {
		// The XPUB hands us the subscription exactly as libzmq decoded it.
		want := "subscribed " + hex.EncodeToString(append([]byte{1}, "kv_metrics"...))
		if got := "subscribed " + p.Expect(t, "subscribed "); got != want {
			t.Fatalf("libzmq decoded our subscription as %q, want %q", got, want)
		}
	}
	goSent := r.mode == "xpub"
	next := uint64(1)
	for next <= uint64(r.count) {
		msg, err := s.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for seq %d: %v\nstderr:\n%s", next, err, p.Stderr())
		}
		if len(msg) != 4 || string(msg[0]) != "kv_metrics" || len(msg[1]) != 8 || len(msg[2]) != 8 {
			t.Fatalf("unexpected message %q", msg)
		}
		if pid := binary.BigEndian.Uint64(msg[1]); pid != pyPublisherID {
			t.Fatalf("publisher id %x", pid)
		}
		seq := binary.BigEndian.Uint64(msg[2])
		if seq == 0 { // pub mode hello: the subscription is live
			if r.mode != "pub" {
				t.Fatal("hello in xpub mode")
			}
			if !goSent {
				p.Send(t, "go")
				goSent = true
			}
			continue
		}
		if seq != next {
			t.Fatalf("seq %d, want %d", seq, next)
		}
		if !bytes.Equal(msg[3], pyPayload(seq)) {
			t.Fatalf("seq %d: payload differs", seq)
		}
		next++
	}
	p.Expect(t, "done")
	return conn
}

func TestLibzmqPUBInterop(t *testing.T) {
	t.Parallel() // waits on real time; runs after the serial (memory) tests
	libzmqRun{mode: "pub", count: 1000}.run(t)
}

func TestLibzmqXPUBInterop(t *testing.T) {
	t.Parallel() // waits on real time; runs after the serial (memory) tests
	libzmqRun{mode: "xpub", count: 1000}.run(t)
}

// libzmq with heartbeats pings the subscriber every 100 ms and drops it if no
// traffic comes back within 300 ms (room for a busy machine's scheduling
// delays). Across a 1.2 s silent gap only PONGs keep the subscription alive.
func TestLibzmqHeartbeatIsAnswered(t *testing.T) {
	t.Parallel() // waits on real time; runs after the serial (memory) tests
	conn := libzmqRun{mode: "xpub", count: 20, gapMs: 1200, hbMs: 100}.run(t)
	if n := bytes.Count(conn.written(), []byte("\x04PONG")); n < 3 {
		t.Fatalf("%d PONGs written across a 1.2 s gap with 100 ms heartbeats", n)
	}
}
