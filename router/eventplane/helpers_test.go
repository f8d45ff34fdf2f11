package eventplane_test

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// python3 finds an interpreter that can import zmq and msgpack: Debian's
// packages live where only the system interpreter looks.
func python3(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if p, err := exec.LookPath(py); err == nil && exec.Command(p, "-c", "import zmq, msgpack").Run() == nil {
			return p
		}
	}
	t.Fatal("no python3 with zmq and msgpack: run hack/install-test-deps.sh (python3-zmq, python3-msgpack)")
	return ""
}

// script runs a python peer and reads its line protocol.
type script struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func runScript(t *testing.T, args ...string) *script {
	t.Helper()
	cmd := exec.Command(python3(t), args...)
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
	s := &script{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
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
	return s
}

func (s *script) expect(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-s.lines:
		if !ok || !strings.HasPrefix(l, prefix) {
			t.Fatalf("python peer said %q, want %q...", l, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(l, prefix))
	case <-time.After(20 * time.Second):
		t.Fatalf("python peer never said %q", prefix)
	}
	return ""
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
