// Package pypeer runs python scripts as independent interop peers in
// tests: libzmq through Debian's python3-zmq, msgpack through
// python3-msgpack (installed by hack/install-test-deps.sh). A missing
// interpreter fails the test rather than skipping it, so interop is never
// silently untested.
package pypeer

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"switchyard/internal/syncbuf"
)

// The waits are generous: the peers start a python interpreter, which on a
// busy machine under the race detector takes seconds, and a wait that
// expires fails the test rather than skipping anything.
const (
	lineWait = 30 * time.Second // for the peer's next stdout line
	exitWait = 30 * time.Second // for the peer to exit once its stdin closes
)

// Python returns an interpreter that can import zmq and msgpack. Debian
// installs its packages for /usr/bin/python3, which a pyenv or venv
// python3 earlier on PATH does not see.
func Python(t testing.TB) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if p, err := exec.LookPath(py); err == nil && exec.Command(p, "-c", "import zmq, msgpack").Run() == nil {
			return p
		}
	}
	t.Fatal("no python3 with zmq and msgpack: run hack/install-test-deps.sh (python3-zmq, python3-msgpack)")
	return ""
}

// Peer is a running script speaking a line protocol on its stdout.
type Peer struct {
	name   string
	stdin  io.WriteCloser
	lines  chan string
	stderr syncbuf.Buffer
}

// Start runs python with args (a script and its flags). The script is
// stopped when the test ends: its stdin closes, and it is killed if it
// has not exited 30 s later. A peer that fails (a non-zero exit, or one
// that had to be killed) fails the test; its stderr is logged whenever the
// test failed.
func Start(t testing.TB, args ...string) *Peer {
	t.Helper()
	cmd := exec.Command(Python(t), args...)
	p := &Peer{name: strings.Join(args, " "), lines: make(chan string, 16)}
	cmd.Stderr = &p.stderr
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
	t.Cleanup(func() { p.stop(t, cmd) })
	return p
}

func (p *Peer) stop(t testing.TB, cmd *exec.Cmd) {
	p.stdin.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil && !t.Failed() {
			t.Errorf("python peer %s: %v", p.name, err)
		}
	case <-time.After(exitWait):
		_ = cmd.Process.Kill()
		<-exited
		t.Errorf("python peer %s did not exit within %v of its stdin closing", p.name, exitWait)
	}
	if t.Failed() {
		t.Logf("python peer %s stderr:\n%s", p.name, p.Stderr())
	}
}

// Expect waits up to 30 s for the next line, which must start with
// prefix, and returns the rest of it, trimmed.
func (p *Peer) Expect(t testing.TB, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok || !strings.HasPrefix(l, prefix) {
			t.Fatalf("python peer said %q (open %v), want %q...", l, ok, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(l, prefix))
	case <-time.After(lineWait):
		t.Fatalf("python peer never said %q within %v", prefix, lineWait)
	}
	return ""
}

// Send writes one line to the peer's stdin.
func (p *Peer) Send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("writing %q to the python peer: %v", line, err)
	}
}

// Stderr is what the peer has written to stderr so far. It may be read
// while the peer runs: the buffer is shared with the goroutine exec starts
// to copy the peer's stderr into it.
func (p *Peer) Stderr() string { return p.stderr.String() }
