//go:build linux

package sockio

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pair returns both ends of a loopback TCP connection, wrapped.
func pair(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	client, server = Wrap(c), Wrap(s)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestWrapKeepsOtherConnections(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Wrap(a) != a {
		t.Fatal("a pipe was wrapped")
	}
	c, _ := pair(t)
	if _, ok := c.(*Conn); !ok {
		t.Fatalf("a TCP connection came back as %T", c)
	}
}

// TestBothWaysAtOnce moves more than the socket buffers hold in both
// directions at once, so writes go out in parts and wait for room, and
// reads wait for data.
func TestBothWaysAtOnce(t *testing.T) {
	client, server := pair(t)
	const size = 8 << 20
	up, down := make([]byte, size), make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range up {
		up[i], down[i] = byte(rng.Uint32()), byte(rng.Uint32())
	}
	var wg sync.WaitGroup
	var gotUp, gotDown []byte
	var errs [4]error
	wg.Add(4)
	go func() { defer wg.Done(); _, errs[0] = client.Write(up) }()
	go func() { defer wg.Done(); _, errs[1] = server.Write(down) }()
	go func() { defer wg.Done(); gotUp, errs[2] = readN(server, size) }()
	go func() { defer wg.Done(); gotDown, errs[3] = readN(client, size) }()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if !bytes.Equal(gotUp, up) || !bytes.Equal(gotDown, down) {
		t.Fatal("bytes arrived changed")
	}
}

func readN(c net.Conn, n int) ([]byte, error) {
	buf := make([]byte, n)
	_, err := io.ReadFull(c, buf)
	return buf, err
}

func TestEndOfStream(t *testing.T) {
	client, server := pair(t)
	if _, err := client.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	client.Close()
	got, err := io.ReadAll(server)
	if err != nil || string(got) != "last words" {
		t.Fatalf("got %q, %v; want the bytes, then a clean end", got, err)
	}
	if n, err := server.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("read after the end = %d, %v; want 0, io.EOF", n, err)
	}
}

func TestZeroLength(t *testing.T) {
	client, _ := pair(t)
	if n, err := client.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v", n, err)
	}
	if n, err := client.Write(nil); n != 0 || err != nil {
		t.Fatalf("Write(nil) = %d, %v", n, err)
	}
}

func TestDeadlines(t *testing.T) {
	client, _ := pair(t)
	if err := client.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := client.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v; want a timeout", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("read error %#v is not a read *net.OpError", err)
	}
	// A write into a peer that never reads fills both buffers, then waits
	// until its deadline.
	if err := client.SetWriteDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	n, err := client.Write(make([]byte, 64<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past its deadline: %v", err)
	}
	if n <= 0 || n >= 64<<20 {
		t.Fatalf("the timed-out write reports %d bytes written; want the part that went out", n)
	}
}

func TestCloseWakesAReader(t *testing.T) {
	client, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := client.Read(make([]byte, 8))
		done <- err
	}()
	// Close once the reader is parked or about to be: either way it must
	// return net.ErrClosed, not hang.
	time.Sleep(10 * time.Millisecond)
	client.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed connection: %v; want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wake the reader")
	}
	if _, err := client.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write on a closed connection: %v; want net.ErrClosed", err)
	}
}

func TestResetByPeer(t *testing.T) {
	client, server := pair(t)
	// Closing with unread data, and no linger, sends a reset.
	if err := server.(*Conn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	server.Close()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = client.Write([]byte("are you there?"))
		if err == nil {
			_, err = client.Read(make([]byte, 8))
		}
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("talking to a reset peer: %v; want ECONNRESET or EPIPE", err)
	}
	var se *os.SyscallError
	if !errors.As(err, &se) {
		t.Fatalf("error %v does not carry its system call", err)
	}
}
