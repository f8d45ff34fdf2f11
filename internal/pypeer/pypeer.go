// Package pypeer runs python scripts as independent interop peers in
// tests: libzmq through Debian's python3-zmq, msgpack through
// python3-msgpack (installed by hack/install-test-deps.sh). A missing
// interpreter fails the test rather than skipping it, so interop is never
// silently untested.
package pypeer

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
	"time"
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
	lines chan string
}

// Start runs python with args (a script and its flags). The script is
// stopped when the test ends: its stdin closes, and it is killed if it
// has not exited 5 s later; its stderr is logged if the test failed.
func Start(t testing.TB, args ...string) *Peer {
	t.Helper()
	cmd := exec.Command(Python(t), args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Peer{lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("python stderr:\n%s", stderr.String())
		}
	})
	return p
}

// Expect waits up to 30 s for the next line, which must start with
// prefix, and returns the rest of it, trimmed.
func (p *Peer) Expect(t testing.TB, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok || !strings.HasPrefix(l, prefix) {
			t.Fatalf("python peer said %q, want %q...", l, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(l, prefix))
	case <-time.After(30 * time.Second):
		t.Fatalf("python peer never said %q", prefix)
	}
	return ""
}
