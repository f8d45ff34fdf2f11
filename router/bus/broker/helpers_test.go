package broker

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"switchyard/internal/syncbuf"
	"switchyard/internal/testpki"
	"switchyard/router/bus"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/eventplane"
)

const (
	testBroker = "broker-a.dynamo"
	testToken  = "broker-a-token"
)

// testPKI is a CA and the listener's certificate for 127.0.0.1 and
// localhost.
type testPKI struct {
	server tls.Certificate
	roots  *x509.CertPool
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	ca := testpki.New(t, "broker test CA")
	return &testPKI{server: ca.Server(t), roots: ca.Pool}
}

func tokenHash(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// settings is a listener with one broker entry for namespaces.
func settings(p *testPKI, namespaces ...string) bus.Settings {
	return bus.Settings{
		Brokers: []config.BusClient{{ID: testBroker, Role: config.BusRoleBroker,
			TokenHash: tokenHash(testToken), Namespaces: namespaces}},
		Certificate: p.server, MaxSessions: 4, MaxStreamsPerSession: 16, MaxSessionBufferBytes: 16 * 64 << 10,
		HeartbeatInterval: time.Second, IdleTimeout: 10 * time.Second, OpenTimeout: 20 * time.Second,
	}
}

// router is a real event-bus listener on loopback, its log captured.
type router struct {
	l    *bus.Listener
	addr string
	log  *syncbuf.Buffer
	done chan error
}

func startRouter(t *testing.T, s bus.Settings, addr string) *router {
	t.Helper()
	r := &router{log: &syncbuf.Buffer{}, done: make(chan error, 1)}
	l, err := bus.New(s, slog.New(slog.NewTextHandler(r.log, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r.l, r.addr = l, ln.Addr().String()
	go func() { r.done <- l.Serve(ln) }()
	t.Cleanup(r.stop)
	return r
}

func (r *router) stop() {
	r.l.Close()
	<-r.done
	r.done <- nil // a second stop returns at once
}

// publishers is a discovery snapshot advertising host:port channels,
// each as a kv_metrics ZMQ publisher of its namespace.
type publishers struct{ snap discovery.Snapshot }

func (p *publishers) add(namespace, hostPort string) {
	p.snap.Publishers = append(p.snap.Publishers, &discovery.Publisher{Namespace: namespace,
		PublisherID: uint64(len(p.snap.Publishers) + 1), Topic: discovery.TopicLoad, ScopeKind: "component",
		Component: "backend", TransportKind: "Zmq", Address: "tcp://" + hostPort})
}

func (p *publishers) directory() SnapshotDirectory {
	return func() *discovery.Snapshot { return &p.snap }
}

// agentConfig dials r with the test token, serving namespaces.
func agentConfig(p *testPKI, r *router, dir Directory, namespaces ...string) Config {
	return Config{
		BusURL: "https://" + r.addr, ClientID: testBroker, Namespaces: namespaces,
		Token: func() (string, error) { return testToken, nil },
		TLS:   &tls.Config{RootCAs: p.roots}, Directory: dir,
	}
}

// runAgent runs an agent until the test ends; the returned channel
// yields Run's result.
func runAgent(t *testing.T, c Config) (*Agent, context.CancelFunc, chan error) {
	t.Helper()
	a, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the agent did not stop")
		}
	})
	return a, cancel, done
}

// waitFor polls cond with a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// target is a publisher target of namespace at hostPort.
func target(t *testing.T, namespace, hostPort string) eventplane.BusTarget {
	t.Helper()
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	return eventplane.BusTarget{Namespace: namespace, Host: host, Port: uint16(n), Topic: discovery.TopicLoad}
}

// opens is switchyard_broker_stream_opens_total{result}.
func opens(m *Metrics, result string) float64 {
	return testutil.ToFloat64(m.StreamOpens.WithLabelValues(result))
}

func attempts(m *Metrics, result string) float64 {
	return testutil.ToFloat64(m.SessionAttempts.WithLabelValues(result))
}

// tcpPublisher is a loopback TCP server standing in for a ZMQ publisher's
// socket: the relay never parses the bytes, so any TCP peer is a real
// publisher to it. Accepted connections arrive on conns.
type tcpPublisher struct {
	ln    net.Listener
	conns chan net.Conn
}

func startPublisher(t *testing.T) *tcpPublisher {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpPublisher{ln: ln, conns: make(chan net.Conn, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-p.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return p
}

func (p *tcpPublisher) addr() string { return p.ln.Addr().String() }

func (p *tcpPublisher) accept(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-p.conns:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("the broker never connected to the publisher")
		return nil
	}
}
