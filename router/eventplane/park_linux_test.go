//go:build linux

package eventplane

import (
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func waitWoken(t *testing.T, ch <-chan string, want string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("%s woke, want %s", got, want)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("%s never woke", want)
	}
}

func isParked(s *parkSlot) bool {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	return s.p.parked[s.key] == s
}

// A parked slot wakes once when bytes arrive, and again after re-parking
// if bytes are still queued (level-triggered), never twice per park.
func TestParkWakesOnceWhenReadable(t *testing.T) {
	client, server := tcpPair(t)
	slot := newParkSlot(client)
	if slot == nil {
		t.Fatal("no slot for a TCP connection")
	}
	var wakes atomic.Int32
	woke := make(chan string, 4)
	resume := func() { wakes.Add(1); woke <- "client" }
	if err := slot.park(resume); err != nil {
		t.Fatal(err)
	}
	if !isParked(slot) {
		t.Fatal("not parked")
	}
	server.Write([]byte("x"))
	waitWoken(t, woke, "client")
	if isParked(slot) {
		t.Fatal("still parked after waking")
	}
	// The byte was not read: parking again wakes at once.
	if err := slot.park(resume); err != nil {
		t.Fatal(err)
	}
	waitWoken(t, woke, "client")
	if n := wakes.Load(); n != 2 {
		t.Fatalf("%d wakes for two parks", n)
	}
}

// A peer that closes wakes the parked side (it then reads EOF).
func TestParkWakesOnHangUp(t *testing.T) {
	client, server := tcpPair(t)
	slot := newParkSlot(client)
	woke := make(chan string, 1)
	if err := slot.park(func() { woke <- "client" }); err != nil {
		t.Fatal(err)
	}
	server.Close()
	waitWoken(t, woke, "client")
}

// A connection closed before it parks is refused with errConnClosed; a
// stop that closes a parked one and wakes it resumes it exactly once.
func TestParkAndStopRace(t *testing.T) {
	client, _ := tcpPair(t)
	slot := newParkSlot(client)
	client.Close()
	if err := slot.park(func() { t.Error("a closed connection parked") }); err != errConnClosed {
		t.Fatalf("park after close: %v, want errConnClosed", err)
	}

	for range 50 {
		client, server := tcpPair(t)
		slot := newParkSlot(client)
		var wakes atomic.Int32
		woke := make(chan string, 2)
		if err := slot.park(func() { wakes.Add(1); woke <- "client" }); err != nil {
			t.Fatal(err)
		}
		// The peer's bytes and a stop race for the one wake.
		go server.Write([]byte("x"))
		client.Close()
		slot.wake()
		waitWoken(t, woke, "client")
		select {
		case <-woke:
			t.Fatal("resumed twice")
		default:
		}
		slot.wake() // a second stop finds nothing parked
		if n := wakes.Load(); n != 1 {
			t.Fatalf("%d resumes", n)
		}
	}
}

// Events name slots, not descriptor numbers: a closed connection's number
// reused by a new one never wakes the old slot.
func TestParkSurvivesDescriptorReuse(t *testing.T) {
	a, _ := tcpPair(t)
	slotA := newParkSlot(a)
	wokeA := make(chan string, 1)
	if err := slotA.park(func() { wokeA <- "a" }); err != nil {
		t.Fatal(err)
	}
	a.Close() // leaves the epoll set; nothing wakes slotA
	b, peerB := tcpPair(t)
	slotB := newParkSlot(b)
	woke := make(chan string, 1)
	if err := slotB.park(func() { woke <- "b" }); err != nil {
		t.Fatal(err)
	}
	peerB.Write([]byte("x"))
	waitWoken(t, woke, "b")
	if !isParked(slotA) || len(wokeA) != 0 {
		t.Fatal("the closed connection's slot woke")
	}
	slotA.wake() // what its stop does
	waitWoken(t, wokeA, "a")
}

// BenchmarkParkWake: one byte wakes a parked connection, which a new
// goroutine reads; the cost an idle session pays per wake.
func BenchmarkParkWake(b *testing.B) {
	client, server := benchPair(b)
	slot := newParkSlot(client)
	done := make(chan struct{})
	buf := make([]byte, 1)
	resume := func() {
		client.Read(buf)
		done <- struct{}{}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := slot.park(resume); err != nil {
			b.Fatal(err)
		}
		server.Write(buf)
		<-done
	}
}

// BenchmarkBlockedReadWake is the same wake for a goroutine that stays
// blocked in Read, as a session that never parks.
func BenchmarkBlockedReadWake(b *testing.B) {
	client, server := benchPair(b)
	done := make(chan struct{})
	go func() {
		buf := make([]byte, 1)
		for {
			if _, err := client.Read(buf); err != nil {
				return
			}
			done <- struct{}{}
		}
	}()
	buf := make([]byte, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		server.Write(buf)
		<-done
	}
}

func benchPair(b *testing.B) (client, server net.Conn) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	server = <-accepted
	b.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// A poller whose wait failed resumes every parked slot and refuses to
// park any more, so sessions fall back to a reading goroutine each.
func TestFailedPollerResumesEverySlot(t *testing.T) {
	p := newPoller() // its waiting goroutine is not started
	if p == nil {
		t.Fatal("no epoll")
	}
	defer closePoller(p)
	woke := make(chan string, 3)
	var slots []*parkSlot
	for i := range 3 {
		c, _ := tcpPair(t)
		tc := c.(*net.TCPConn)
		rc, err := tc.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		s := &parkSlot{p: p, key: uint64(i + 1), rc: rc}
		if err := s.park(func() { woke <- "slot" }); err != nil {
			t.Fatal(err)
		}
		slots = append(slots, s)
	}
	p.fail()
	for range slots {
		waitWoken(t, woke, "slot")
	}
	if err := slots[0].park(func() { t.Error("parked on a failed poller") }); err != errPollerDown {
		t.Fatalf("park on a failed poller: %v", err)
	}
}

func closePoller(p *poller) {
	syscall.Close(p.epfd)
	syscall.Close(p.stopR)
	syscall.Close(p.stopW)
}

func pollerRunning(p *poller) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running
}

// The waiting goroutine ends with the last slot's release and starts
// again with the next slot, which parks and wakes as before.
func TestPollerGoroutineEndsWithItsLastSlot(t *testing.T) {
	p := newPoller()
	if p == nil {
		t.Fatal("no epoll")
	}
	// Closed only once its goroutine ended, below.
	a, _ := tcpPair(t)
	b, peerB := tcpPair(t)
	sa, sb := p.slot(a.(*net.TCPConn)), p.slot(b.(*net.TCPConn))
	if !pollerRunning(p) {
		t.Fatal("no waiting goroutine with two slots")
	}
	a.Close()
	sa.release() // one slot left: the goroutine keeps waiting
	woke := make(chan string, 1)
	if err := sb.park(func() { woke <- "b" }); err != nil {
		t.Fatal(err)
	}
	peerB.Write([]byte("x"))
	waitWoken(t, woke, "b")
	b.Close()
	sb.release()
	deadline := time.Now().Add(15 * time.Second)
	for pollerRunning(p) {
		if time.Now().After(deadline) {
			t.Fatal("the waiting goroutine outlived its last slot")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c, peerC := tcpPair(t)
	sc := p.slot(c.(*net.TCPConn))
	if !pollerRunning(p) {
		t.Fatal("a new slot did not start the waiting goroutine")
	}
	if err := sc.park(func() { woke <- "c" }); err != nil {
		t.Fatal(err)
	}
	peerC.Write([]byte("x"))
	waitWoken(t, woke, "c")
	c.Close()
	sc.release()
	for pollerRunning(p) {
		if time.Now().After(deadline) {
			t.Fatal("the waiting goroutine outlived its last slot")
		}
		time.Sleep(5 * time.Millisecond)
	}
	closePoller(p)
}
