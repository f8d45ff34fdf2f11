package zmtp

import (
	"bytes"
	"net"
	"runtime"
	"testing"

	"switchyard/router/envelope"
)

// steadyStream writes n kv_metrics-shaped messages (4 frames, ~200 B
// payload) after the handshake.
func steadyStream(n int) func(net.Conn) error {
	return func(c net.Conn) error {
		payload := bytes.Repeat([]byte{0x5A}, 200)
		var b []byte
		for seq := range n {
			b = append(b, message(kvMetrics(9, uint64(seq), payload)...)...)
		}
		_, err := c.Write(b)
		return err
	}
}

// Reading steady-state messages allocates nothing: frames land in the
// reused arena and the result slice is reused.
func TestReadMessageSteadyStateAllocatesNothing(t *testing.T) {
	const runs = 2000
	s, _ := handshaken(t, envelope.LoadLimits, steadyStream(runs+200))
	for range 100 { // warm-up: arena and result slice reach their size
		if _, err := s.ReadMessage(); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	allocs := testing.AllocsPerRun(runs, func() {
		var msg [][]byte
		if msg, err = s.ReadMessage(); err == nil && len(msg) != 4 {
			t.Fatalf("got %d frames", len(msg))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Fatalf("ReadMessage allocates %.2f times per message in steady state, want 0", allocs)
	}
}

// Heap owned by idle subscriptions, measured over 1,024 real TCP
// subscriptions to one in-test publisher. Connections are set up and the
// publisher's greeting and READY are already in the kernel before the first
// measurement, so the delta is what Handshake and the Sub allocate.
func TestIdleSubscriptionHeap(t *testing.T) {
	const n = 1024
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, n)
	go func() {
		hello := pubHello(1)
		for range n {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			if _, err := c.Write(hello); err != nil {
				c.Close()
			}
			accepted <- c
		}
	}()
	clients := make([]net.Conn, n)
	peers := make([]net.Conn, 0, n)
	for i := range clients {
		if clients[i], err = net.Dial("tcp", ln.Addr().String()); err != nil {
			t.Fatal(err)
		}
		defer clients[i].Close()
	}
	for range n {
		c, ok := <-accepted
		if !ok {
			t.Fatal("accept failed")
		}
		peers = append(peers, c)
		defer c.Close()
	}
	subs := make([]*Sub, n)
	topics := [][]byte{[]byte("kv_metrics")}

	before := heapAfterGC()
	for i, c := range clients {
		if subs[i], err = Handshake(c, topics, envelope.LoadLimits); err != nil {
			t.Fatal(err)
		}
	}
	idle := heapAfterGC()
	perIdle := float64(int64(idle)-int64(before)) / n

	// One kv_metrics message each: the arena (512 B) and result slice appear.
	msg := message(kvMetrics(1, 1, bytes.Repeat([]byte{1}, 200))...)
	for i, s := range subs {
		if _, err := peers[i].Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ReadMessage(); err != nil {
			t.Fatal(err)
		}
	}
	active := heapAfterGC()
	perActive := float64(int64(active)-int64(before)) / n
	runtime.KeepAlive(subs)

	t.Logf("heap per idle subscription after handshake: %.0f B (read buffer %d B + Sub %d B); after the first kv_metrics message: %.0f B (x %d = %.2f MiB)",
		perIdle, readBufSize, sizeofSub, perActive, n, perActive*n/(1<<20))
	if perIdle > 4096 || perActive > 4096 {
		t.Fatalf("subscriptions own %.0f B idle, %.0f B active; the budget is 4 KiB", perIdle, perActive)
	}
}

func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
