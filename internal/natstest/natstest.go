// Package natstest runs a real NATS server (Debian's nats-server, installed
// by hack/install-test-deps.sh) on loopback for tests. A missing server
// skips the test with a message saying how to install it, except under CI
// (CI set), where it fails: replica sync over NATS is never silently
// untested there.
package natstest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"switchyard/internal/syncbuf"
)

// readyWait bounds a start: the server prints that it is ready within
// milliseconds on an idle machine, seconds on a busy one.
const readyWait = 30 * time.Second

// Server is one nats-server process on a loopback port that survives
// restarts.
type Server struct {
	t    testing.TB
	bin  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
	log  syncbuf.Buffer
	// URL is nats://127.0.0.1:<port>.
	URL string
}

// Binary finds nats-server on PATH or where Debian installs it (/usr/sbin
// is not on every user's PATH).
func Binary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server"
	}
	msg := "nats-server is missing: run hack/install-test-deps.sh (Debian's nats-server)"
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this test may not skip)", msg)
	}
	t.Skip(msg)
	return ""
}

// Start runs a server on a free loopback port and waits until it serves.
// It is stopped when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &Server{t: t, bin: Binary(t), port: port, URL: "nats://127.0.0.1:" + strconv.Itoa(port)}
	s.start()
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("nats-server log:\n%s", s.log.String())
		}
	})
	return s
}

func (s *Server) start() {
	s.t.Helper()
	cmd := exec.Command(s.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(&s.log, line)
			if !signalled && strings.Contains(line, "Server is ready") {
				signalled = true
				close(ready)
			}
		}
		cmd.Wait()
	}()
	s.cmd, s.done = cmd, done
	select {
	case <-ready:
	case <-done:
		s.t.Fatalf("nats-server exited before it was ready:\n%s", s.log.String())
	case <-time.After(readyWait):
		s.Stop()
		s.t.Fatalf("nats-server not ready after %s:\n%s", readyWait, s.log.String())
	}
}

// Stop kills the server and waits for it to exit; a stopped server is
// left alone.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart stops the server and starts a new one on the same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}
