package zmtp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// libzmq, driven through Debian's python3-zmq, is the independent ZMTP
// implementation these tests interoperate with. It is a required test
// dependency: a missing one fails the test instead of skipping it, so that
// interop is never silently untested.

var (
	pythonOnce sync.Once
	pythonPath string
)

// libzmqPython returns a python3 that can import zmq. Debian installs
// python3-zmq for /usr/bin/python3, which a pyenv or venv python3 earlier on
// PATH does not see, so both are tried (as hack/install-test-deps.sh does).
func libzmqPython(t *testing.T) string {
	t.Helper()
	pythonOnce.Do(func() {
		for _, name := range []string{"python3", "/usr/bin/python3"} {
			path, err := exec.LookPath(name)
			if err != nil {
				continue
			}
			if exec.Command(path, "-c", "import zmq").Run() == nil {
				pythonPath = path
				return
			}
		}
	})
	if pythonPath == "" {
		t.Fatal("no python3 can `import zmq` (libzmq is the interop peer of these tests): run hack/install-test-deps.sh")
	}
	return pythonPath
}

const pyPublisherID = 0x5157495443485944

// pyPayload mirrors payload() in testdata/pub.py.
func pyPayload(seq uint64) []byte {
	p := make([]byte, 180+seq%64)
	for i := range p {
		p[i] = byte((seq + uint64(i)) % 251)
	}
	return p
}

type pyPub struct {
	stdin  io.WriteCloser
	lines  chan string
	stderr *bytes.Buffer
}

func startPyPub(t *testing.T, args ...string) (*pyPub, string) {
	t.Helper()
	cmd := exec.Command(libzmqPython(t), append([]string{"testdata/pub.py"}, args...)...)
	p := &pyPub{lines: make(chan string, 16), stderr: new(bytes.Buffer)}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		p.stdin.Close()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil && !t.Failed() {
				t.Errorf("pub.py: %v\n%s", err, p.stderr)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("pub.py did not exit\n%s", p.stderr)
		}
	})
	port := strings.TrimPrefix(p.expect(t, "port "), "port ")
	if _, err := strconv.Atoi(port); err != nil {
		t.Fatalf("pub.py printed port %q", port)
	}
	return p, "127.0.0.1:" + port
}

// expect returns pub.py's next stdout line, which must start with prefix.
func (p *pyPub) expect(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok || !strings.HasPrefix(line, prefix) {
			t.Fatalf("pub.py: got %q (open %v), want %q…\nstderr:\n%s", line, ok, prefix, p.stderr)
		}
		return line
	case <-time.After(10 * time.Second):
		t.Fatalf("pub.py: no %q line within 10s\nstderr:\n%s", prefix, p.stderr)
	}
	return ""
}

// recordingConn keeps a copy of everything the Sub writes, so a test can see
// the PONGs it sent.
type recordingConn struct {
	net.Conn
	mu  sync.Mutex
	out bytes.Buffer
}

func (c *recordingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.out.Write(b)
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *recordingConn) written() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out.Bytes())
}

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
	s, err := Handshake(conn, [][]byte{[]byte("kv_metrics")}, LoadLimits)
	if err != nil {
		t.Fatal(err)
	}
	if s.PeerMinor() != 1 {
		t.Errorf("libzmq 4.3 speaks ZMTP 3.1, PeerMinor = %d", s.PeerMinor())
	}
	if r.mode == "xpub" {
		// The XPUB hands us the subscription exactly as libzmq decoded it.
		want := "subscribed " + hex.EncodeToString(append([]byte{1}, "kv_metrics"...))
		if got := p.expect(t, "subscribed "); got != want {
			t.Fatalf("libzmq decoded our subscription as %q, want %q", got, want)
		}
	}
	goSent := r.mode == "xpub"
	next := uint64(1)
	for next <= uint64(r.count) {
		msg, err := s.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for seq %d: %v\nstderr:\n%s", next, err, p.stderr)
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
				if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
					t.Fatal(err)
				}
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
	p.expect(t, "done")
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

// libzmq with heartbeats pings the subscriber every 50 ms and drops it if no
// traffic comes back within 150 ms. Across a 600 ms silent gap only PONGs
// keep the subscription alive.
func TestLibzmqHeartbeatIsAnswered(t *testing.T) {
	t.Parallel() // waits on real time; runs after the serial (memory) tests
	conn := libzmqRun{mode: "xpub", count: 20, gapMs: 600, hbMs: 50}.run(t)
	if n := bytes.Count(conn.written(), []byte("\x04PONG")); n < 3 {
		t.Fatalf("%d PONGs written across a 600 ms gap with 50 ms heartbeats", n)
	}
}
