package broker_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"switchyard/fakefleet/wire"
	"switchyard/internal/testpki"
	"switchyard/router/bus"
	"switchyard/router/bus/broker"
	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
)

// The relay benchmarks put the whole tunnel on loopback: a ZMQ publisher,
// switchyard broker's agent, the router's TLS/HTTP/2 event-bus listener and
// a kv_metrics subscription running the router's ZMTP client over the
// relayed stream. The direct subscription to the same publisher, in the
// same run, is the baseline.

const relayToken = "relay-bench-token"

// relayPKI is a throwaway CA and the listener's certificate for localhost.
type relayPKI struct {
	server tls.Certificate
	roots  *x509.CertPool
	caDER  []byte
}

func newRelayPKI(tb testing.TB) relayPKI {
	tb.Helper()
	ca := testpki.New(tb, "relay bench CA")
	return relayPKI{server: ca.Server(tb), roots: ca.Pool, caDER: ca.DER}
}

func sha256Hex(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// relayListener serves the router's event-bus listener on loopback with
// the default session budget (64 MiB) over maxStreams streams per session
// (config.DefaultMaxStreamsPerSession, 1,024, gives 16 KiB stream windows).
func relayListener(tb testing.TB, p relayPKI, maxStreams int) (*bus.Listener, string) {
	tb.Helper()
	sum := sha256Hex(relayToken)
	l, err := bus.New(bus.Settings{
		Brokers:     []config.BusClient{{ID: "broker-a", Role: config.BusRoleBroker, TokenHash: sum, Namespaces: []string{"dynamo"}}},
		Certificate: p.server, MaxSessions: config.DefaultMaxSessions,
		MaxStreamsPerSession: maxStreams, MaxSessionBufferBytes: config.DefaultMaxSessionBufferBytes,
		HeartbeatInterval: 10 * time.Second, IdleTimeout: 30 * time.Second,
	}, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go l.Serve(ln)
	tb.Cleanup(func() { l.Close() })
	return l, ln.Addr().String()
}

// advertiseAll is a broker directory in which every publisher is
// advertised: the benchmarks measure the relay, not discovery.
type advertiseAll struct{}

func (advertiseAll) Advertised(string, string) bool { return true }

// relayAgent runs switchyard broker's agent against the listener at addr
// until the test ends, and waits for its session.
func relayAgent(tb testing.TB, p relayPKI, l *bus.Listener, addr string) {
	tb.Helper()
	a, err := broker.New(broker.Config{
		BusURL: "https://" + addr, ClientID: "broker-a", Namespaces: []string{"dynamo"},
		Token: func() (string, error) { return relayToken, nil },
		TLS:   &tls.Config{RootCAs: p.roots, ServerName: "localhost"}, Directory: advertiseAll{},
		Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	waitFor(tb, "the broker's session", func() bool { return l.Covers("dynamo") })
}

func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// zmtpMessage appends the ZMTP framing of one multipart message.
func zmtpMessage(dst []byte, frames [][]byte) []byte {
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = 0x01
		}
		if len(f) > 255 {
			dst = append(dst, flags|0x02)
			dst = binary.BigEndian.AppendUint64(dst, uint64(len(f)))
		} else {
			dst = append(dst, flags, byte(len(f)))
		}
		dst = append(dst, f...)
	}
	return dst
}

// pubGreeting is the PUB side's greeting and READY.
func pubGreeting() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 0
	copy(g[12:], "NULL")
	ready := []byte{5, 'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o', 'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e', 0, 0, 0, 3, 'P', 'U', 'B'}
	g = append(g, 0x04, byte(len(ready)))
	return append(g, ready...)
}

// floodPublisher is a ZMQ publisher on loopback that, once a subscriber
// connects, writes kv_metrics messages as fast as the connection takes
// them: a block of batch messages with increasing sequences, over and over.
type floodPublisher struct {
	addr    string
	block   []byte
	batch   int
	msgSize int // ZMTP bytes per message
}

const relayPID = 4242

func startFloodPublisher(tb testing.TB) *floodPublisher {
	tb.Helper()
	const batch = 1024
	var block []byte
	for i := 1; i <= batch; i++ {
		block = zmtpMessage(block, wire.LoadMessage(relayPID, uint64(i),
			wire.ActiveLoad{WorkerID: 7, KVUsedBlocks: wire.U64(uint64(i))}, time.Unix(1_700_000_000, 0)))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	p := &floodPublisher{addr: ln.Addr().String(), block: block, batch: batch, msgSize: len(block) / batch}
	greeting := pubGreeting()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				go func() {
					buf := make([]byte, 512)
					for {
						if _, err := c.Read(buf); err != nil {
							c.Close()
							return
						}
					}
				}()
				if _, err := c.Write(greeting); err != nil {
					return
				}
				for {
					if _, err := c.Write(block); err != nil {
						return
					}
				}
			}()
		}
	}()
	tb.Cleanup(func() { ln.Close() })
	return p
}

// countingSink counts messages and their frame bytes; it keeps nothing,
// so the figure is the transport's.
type countingSink struct {
	msgs  atomic.Int64
	bytes atomic.Int64
}

func (s *countingSink) Connected(string, uint64, time.Time) {}
func (s *countingSink) Deliver(_ string, _ uint64, frames [][]byte, _ time.Time) {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	s.bytes.Add(int64(n))
	s.msgs.Add(1)
}

// cpuTime is the process's user and system time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func publisherSnapshot(addrs ...string) *discovery.Snapshot {
	snap := &discovery.Snapshot{}
	for i, a := range addrs {
		snap.Publishers = append(snap.Publishers, &discovery.Publisher{Namespace: "dynamo", PublisherID: uint64(relayPID + i),
			Topic: discovery.TopicLoad, TransportKind: "Zmq", Address: "tcp://" + a})
	}
	return snap
}

// BenchmarkRelayThroughput is one kv_metrics stream read as fast as the
// router takes it: direct (TCP to the publisher) and broker (publisher →
// broker agent → TLS/HTTP/2 listener → ZMTP client), the latter with the
// default 16 KiB stream windows and with 256 KiB ones (64 streams per
// session). One op is one message; MB/s counts ZMTP bytes on the
// publisher's wire.
func BenchmarkRelayThroughput(b *testing.B) {
	for _, c := range []struct {
		name       string
		transport  string
		maxStreams int
	}{
		{"direct", eventplane.TransportDirect, 0},
		{"broker", eventplane.TransportBroker, config.DefaultMaxStreamsPerSession},
		{"broker-256KiB", eventplane.TransportBroker, 64},
	} {
		transport := c.transport
		b.Run(c.name, func(b *testing.B) {
			pub := startFloodPublisher(b)
			policy := eventplane.Policy{Transport: eventplane.TransportDirect, Dialer: &eventplane.Dialer{}}
			if transport == eventplane.TransportBroker {
				p := newRelayPKI(b)
				l, addr := relayListener(b, p, c.maxStreams)
				relayAgent(b, p, l, addr)
				policy = eventplane.Policy{Transport: eventplane.TransportBroker, Bus: l}
			}
			sink := &countingSink{}
			sup := eventplane.NewSupervisor(eventplane.Family{Topic: discovery.TopicLoad, Limits: envelope.LoadLimits, Sink: sink},
				policy, clock.Real{}, slog.New(slog.DiscardHandler), nil)
			defer sup.Stop()
			sup.Reconcile(publisherSnapshot(pub.addr))
			// Warm up: the stream is open and flowing.
			waitFor(b, "the first messages", func() bool { return sink.msgs.Load() >= int64(pub.batch) })
			b.SetBytes(int64(pub.msgSize))
			b.ResetTimer()
			cpu0 := cpuTime()
			start := sink.msgs.Load()
			for sink.msgs.Load()-start < int64(b.N) {
				time.Sleep(100 * time.Microsecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			// The whole path's CPU (publisher, broker, listener and client
			// share the process): steadier than wall time on a busy machine.
			b.ReportMetric(float64(b.N)/(cpuTime()-cpu0).Seconds(), "msgs/cpu-s")
			if subs := sup.Subscriptions(); len(subs) != 1 || subs[0].Transport != transport {
				b.Fatalf("subscriptions %+v", subs)
			}
		})
	}
}
