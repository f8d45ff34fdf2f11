package broker_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"switchyard/router/bus/broker"
	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
)

// The idle-subscription memory test runs the publisher and the broker in
// processes of their own (this test binary, re-executed), so each side's
// heap and goroutine stacks are measured alone: the router's here, the
// broker's in its process.

const helperEnv = "SWITCHYARD_RELAY_HELPER"

// heapAndStack is the live heap and the goroutine stacks after the
// collector settled (each GC may halve an oversized stack).
func heapAndStack() (heap, stack uint64) {
	for i := 0; i < 6; i++ {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.StackInuse
}

// TestRelayHelperProcess is the body of the helper processes; run
// directly it does nothing.
func TestRelayHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "publisher":
		helperPublisher()
	case "broker":
		helperBroker()
	default:
		return
	}
	os.Exit(0)
}

// helperPublisher serves idle PUB sides (greeting, then silence) and
// prints its address; it ends when its stdin closes.
func helperPublisher() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		return
	}
	greeting := pubGreeting()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write(greeting)
				buf := make([]byte, 512)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	fmt.Println("addr", ln.Addr().String())
	io.Copy(io.Discard, os.Stdin)
}

// helperBroker runs the agent against the listener named in its
// environment; each "measure" line on stdin is answered with its heap,
// stacks and open streams.
func helperBroker() {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(os.Getenv("RELAY_CA")))
	met := broker.NewMetrics()
	a, err := broker.New(broker.Config{
		BusURL: "https://" + os.Getenv("RELAY_BUS"), ClientID: "broker-a", Namespaces: []string{"dynamo"},
		Token: func() (string, error) { return relayToken, nil },
		TLS:   &tls.Config{RootCAs: roots, ServerName: "localhost"}, Directory: advertiseAll{},
		Log: slog.New(slog.DiscardHandler), Metrics: met,
	})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "measure" {
			h, s := heapAndStack()
			fmt.Println("mem", h, s, int(testutil.ToFloat64(met.Streams)))
		}
	}
	cancel()
	<-done
}

// helper is a running helper process.
type helper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startHelper(t *testing.T, role string, env ...string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayHelperProcess$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+role), env...)
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
	return &helper{cmd: cmd, in: in, out: bufio.NewScanner(out)}
}

// line reads the helper's next line whose first word is key.
func (h *helper) line(t *testing.T, key string) []string {
	t.Helper()
	got := make(chan []string, 1)
	go func() {
		for h.out.Scan() {
			if f := strings.Fields(h.out.Text()); len(f) > 0 && (f[0] == key || f[0] == "error") {
				got <- f
				return
			}
		}
		got <- nil
	}()
	select {
	case f := <-got:
		if len(f) == 0 || f[0] != key {
			t.Fatalf("helper: want %q, got %v", key, f)
		}
		return f[1:]
	case <-time.After(60 * time.Second):
		t.Fatalf("helper: no %q line", key)
	}
	return nil
}

func (h *helper) measure(t *testing.T) (heap, stack uint64, streams int) {
	t.Helper()
	fmt.Fprintln(h.in, "measure")
	f := h.line(t, "mem")
	if _, err := fmt.Sscan(strings.Join(f, " "), &heap, &stack, &streams); err != nil {
		t.Fatal(err)
	}
	return heap, stack, streams
}

func allParked(sup *eventplane.Supervisor, n int) func() bool {
	return func() bool {
		subs := sup.Subscriptions()
		if len(subs) != n {
			return false
		}
		for _, s := range subs {
			if s.State != eventplane.Connected || !s.Parked {
				return false
			}
		}
		return true
	}
}

func allConnected(sup *eventplane.Supervisor, n int) func() bool {
	return func() bool {
		subs := sup.Subscriptions()
		if len(subs) != n {
			return false
		}
		for _, s := range subs {
			if s.State != eventplane.Connected {
				return false
			}
		}
		return true
	}
}

func perSub(after, before uint64, n int) float64 {
	return (float64(after) - float64(before)) / float64(n)
}

// TestMemoryPerIdleTunneledSubscription measures 1,024 idle kv_metrics
// subscriptions carried by one broker session: the router's heap and
// stacks (listener streams, relayed conns, ZMTP clients, subscription
// state) and the broker's (publisher connections, data-stream requests,
// copy goroutines), each per subscription, beside 1,024 direct idle
// subscriptions to the same publisher measured in the same run. The
// figures are logged and recorded in docs/benchmarks.md; the assertions
// are loose ceilings.
func TestMemoryPerIdleTunneledSubscription(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 2,048 connections and two helper processes")
	}
	const n = eventplane.MaxSubscriptions
	pubProc := startHelper(t, "publisher")
	addr := pubProc.line(t, "addr")[0]
	snap := &discovery.Snapshot{}
	for i := 1; i <= n; i++ {
		snap.Publishers = append(snap.Publishers, &discovery.Publisher{Namespace: "dynamo", PublisherID: uint64(i),
			Topic: discovery.TopicLoad, TransportKind: "Zmq", Address: "tcp://" + addr})
	}
	fam := eventplane.Family{Topic: discovery.TopicLoad, Limits: envelope.LoadLimits, Sink: &countingSink{}}
	log := slog.New(slog.DiscardHandler)

	// Direct, the baseline.
	dh0, ds0 := heapAndStack()
	direct := eventplane.NewSupervisor(fam, eventplane.Policy{Transport: eventplane.TransportDirect, Dialer: &eventplane.Dialer{}},
		clock.Real{}, log, nil)
	direct.Reconcile(snap)
	// An idle direct session parks (docs/load.md): measure it parked.
	waitFor(t, "1,024 direct subscriptions, parked", allParked(direct, n))
	dh1, ds1 := heapAndStack()
	direct.Stop()
	waitFor(t, "the direct subscriptions to end", func() bool { return len(direct.Subscriptions()) == 0 })

	// Tunneled: one broker session carries every subscription.
	p := newRelayPKI(t)
	l, busAddr := relayListener(t, p, config.DefaultMaxStreamsPerSession)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.caDER})
	brokerProc := startHelper(t, "broker", "RELAY_BUS="+busAddr, "RELAY_CA="+string(caPEM))
	waitFor(t, "the broker's session", func() bool { return l.Covers("dynamo") })
	time.Sleep(100 * time.Millisecond) // let the direct run's goroutines finish exiting
	rh0, rs0 := heapAndStack()
	bh0, bs0, _ := brokerProc.measure(t)
	tunneled := eventplane.NewSupervisor(fam, eventplane.Policy{Transport: eventplane.TransportBroker, Bus: l},
		clock.Real{}, log, nil)
	defer tunneled.Stop()
	tunneled.Reconcile(snap)
	waitFor(t, "1,024 tunneled subscriptions", allConnected(tunneled, n))
	rh1, rs1 := heapAndStack()
	bh1, bs1, streams := brokerProc.measure(t)
	if streams != n {
		t.Fatalf("the broker holds %d streams, want %d", streams, n)
	}

	directKiB := (perSub(dh1, dh0, n) + perSub(ds1, ds0, n)) / 1024
	routerKiB := (perSub(rh1, rh0, n) + perSub(rs1, rs0, n)) / 1024
	brokerKiB := (perSub(bh1, bh0, n) + perSub(bs1, bs0, n)) / 1024
	t.Logf("direct, router side:   %.1f KiB per idle subscription (heap %.1f KiB + stack %.1f KiB)",
		directKiB, perSub(dh1, dh0, n)/1024, perSub(ds1, ds0, n)/1024)
	t.Logf("tunneled, router side: %.1f KiB per idle subscription (heap %.1f KiB + stack %.1f KiB), %.2f× direct",
		routerKiB, perSub(rh1, rh0, n)/1024, perSub(rs1, rs0, n)/1024, routerKiB/directKiB)
	t.Logf("tunneled, broker side: %.1f KiB per idle subscription (heap %.1f KiB + stack %.1f KiB)",
		brokerKiB, perSub(bh1, bh0, n)/1024, perSub(bs1, bs0, n)/1024)
	if routerKiB > 128 || brokerKiB > 128 {
		t.Fatalf("an idle tunneled subscription costs the router %.1f KiB and the broker %.1f KiB", routerKiB, brokerKiB)
	}
}
