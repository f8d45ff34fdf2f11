//go:build linux

package eventplane_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/load"
)

// The idle-subscription memory test runs its publishers in a process of
// their own (this test binary, re-executed), so the router's heap and
// stacks are measured alone and the descriptors of both ends of 16,384
// connections are not counted against one process's limit.

const idleHelperEnv = "SWITCHYARD_IDLE_PUBLISHER"

// idleListeners spreads the connections over several ports, so 16,384 of
// them never crowd one (address, port) pair's ephemeral range.
const idleListeners = 8

// TestIdlePublisherProcess is the body of the publisher process; run
// directly it does nothing.
func TestIdlePublisherProcess(t *testing.T) {
	if os.Getenv(idleHelperEnv) == "" {
		return
	}
	idlePublisherMain()
	os.Exit(0)
}

// idlePublisherMain accepts connections on idleListeners ports, writes the
// PUB side of the handshake to each and then holds it silently, without a
// goroutine per connection (the peer's SUBSCRIBE fits the socket buffer).
// It prints one "addr" line per listener and ends when its stdin closes.
func idlePublisherMain() {
	raiseFDLimit()
	greeting := publisherGreeting()
	for i := 0; i < idleListeners; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println("error", err)
			return
		}
		go func() {
			var held []net.Conn
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write(greeting)
				held = append(held, c)
			}
		}()
		fmt.Println("addr", ln.Addr().String())
	}
	io.Copy(io.Discard, os.Stdin)
}

// raiseFDLimit lifts the soft descriptor limit to the hard one (Go does so
// at start on Linux; done again here to be sure) and returns the result.
func raiseFDLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	return l.Cur
}

// idlePublisherAddrs starts the publisher process and returns its
// listeners' addresses.
func idlePublisherAddrs(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdlePublisherProcess$")
	cmd.Env = append(os.Environ(), idleHelperEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	got := make(chan []string, 1)
	go func() {
		var addrs []string
		sc := bufio.NewScanner(out)
		for len(addrs) < idleListeners && sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "addr" {
				addrs = append(addrs, f[1])
			} else if len(f) > 0 && f[0] == "error" {
				break
			}
		}
		got <- addrs
	}()
	select {
	case addrs := <-got:
		if len(addrs) != idleListeners {
			t.Fatalf("publisher process: got %d addresses, want %d", len(addrs), idleListeners)
		}
		return addrs
	case <-time.After(60 * time.Second):
		t.Fatal("publisher process: no addresses")
	}
	return nil
}

// settledHeapAndStack is the live heap and the goroutine stacks after the
// collector settled (each GC may halve an oversized stack).
func settledHeapAndStack() (heap, stack uint64) {
	for i := 0; i < 6; i++ {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.StackInuse
}

// TestMemoryPerIdleSubscription measures what idle kv_metrics subscriptions
// cost the router, at 1,024 (one supervisor's cap) and 16,384 (sixteen
// supervisors): heap (connections, ZMTP state, subscription state) and
// goroutine stacks, to publishers in another process that handshake and
// stay silent. The figures are logged and recorded in docs/benchmarks.md.
// The ceiling applies to the cost of each further subscription between
// the two runs, which leaves out what the process holds once however many
// subscriptions there are (stack caches, the poller).
func TestMemoryPerIdleSubscription(t *testing.T) {
	if testing.Short() {
		t.Skip("opens up to 16,384 connections")
	}
	sizes := []int{1024, 16384}
	var totals []float64
	for _, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			if limit := raiseFDLimit(); limit < uint64(n)+256 {
				t.Fatalf("the descriptor limit (%d) is below %d subscriptions and the test's own; raise ulimit -n", limit, n)
			}
			totals = append(totals, measureIdleSubscriptions(t, n)*float64(n))
		})
	}
	if len(totals) != len(sizes) {
		return // a run failed
	}
	marginal := (totals[1] - totals[0]) / float64(sizes[1]-sizes[0])
	t.Logf("each further idle subscription: %.2f KiB", marginal/1024)
	if marginal > raceStacks*idleCeiling {
		t.Fatalf("an idle subscription costs %.2f KiB, above %d KiB", marginal/1024, raceStacks*idleCeiling>>10)
	}
}

// measureIdleSubscriptions opens n idle subscriptions and returns the bytes
// of heap and stack each holds.
func measureIdleSubscriptions(t *testing.T, n int) float64 {
	addrs := idlePublisherAddrs(t)
	var sups []*eventplane.Supervisor
	defer func() {
		for _, s := range sups {
			s.Stop()
		}
	}()
	heap0, stack0 := settledHeapAndStack()
	for first := 0; first < n; first += eventplane.MaxSubscriptions {
		snap := &discovery.Snapshot{}
		for i := first; i < min(first+eventplane.MaxSubscriptions, n); i++ {
			snap.Publishers = append(snap.Publishers, &discovery.Publisher{Namespace: "dynamo", PublisherID: uint64(i + 1),
				Topic: discovery.TopicLoad, TransportKind: "Zmq", Address: "tcp://" + addrs[i%len(addrs)]})
		}
		sup := eventplane.NewSupervisor(eventplane.Family{Topic: discovery.TopicLoad, Limits: envelope.LoadLimits,
			Sink: load.Subscriber{Store: load.NewStore(nil)}}, eventplane.Policy{Transport: eventplane.TransportDirect,
			Dialer: &eventplane.Dialer{}}, clock.Real{}, slog.New(slog.DiscardHandler), nil)
		sups = append(sups, sup)
		sup.Reconcile(snap)
	}
	waitIdle(t, sups, n)
	heap1, stack1 := settledHeapAndStack()
	heap := (float64(heap1) - float64(heap0)) / float64(n)
	stack := (float64(stack1) - float64(stack0)) / float64(n)
	t.Logf("%d idle subscriptions: heap %.2f KiB + stacks %.2f KiB = %.2f KiB each (%.1f MiB in all)",
		n, heap/1024, stack/1024, (heap+stack)/1024, (heap+stack)*float64(n)/(1<<20))
	return heap + stack
}

// waitIdle waits, with a deadline generous for 16,384 connections on a
// busy machine, until every subscription is connected and idle.
func waitIdle(t *testing.T, sups []*eventplane.Supervisor, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ready := 0
		for _, s := range sups {
			for _, info := range s.Subscriptions() {
				if idleReady(info) {
					ready++
				}
			}
		}
		if ready == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d subscriptions connected and idle", ready, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// idleCeiling bounds one idle subscription's heap and stack: the goal of
// parking idle sessions.
const idleCeiling = 4 << 10

// idleReady: the subscription has its session, which went idle and parked.
func idleReady(info eventplane.SubscriptionInfo) bool {
	return info.State == eventplane.Connected && info.Parked
}
