package broker

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	mrand "math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"switchyard/router/bus/wire"
	"switchyard/router/discovery"
	"switchyard/router/eventplane"
)

// The directory names only ZMQ tcp:// channels of the snapshot, in the
// namespace that advertises them.
func TestSnapshotDirectoryAdvertisesDiscoveredChannelsOnly(t *testing.T) {
	snap := &discovery.Snapshot{}
	snap.Publishers = []*discovery.Publisher{
		{Namespace: "dynamo", Topic: discovery.TopicLoad, TransportKind: "Zmq", Address: "tcp://10.0.0.4:5557"},
		{Namespace: "dynamo", Topic: discovery.TopicKVEvents, TransportKind: "Zmq", Address: "tcp://Worker-1.Example:5558"},
		{Namespace: "dynamo", Topic: discovery.TopicLoad, TransportKind: "ZmqBroker", Address: "tcp://10.0.0.5:5557"},
		{Namespace: "dynamo", Topic: "other-topic", TransportKind: "Zmq", Address: "tcp://10.0.0.6:5557"},
		{Namespace: "prod", Topic: discovery.TopicLoad, TransportKind: "Zmq", Address: "tcp://[fd00::7]:5557"},
	}
	d := SnapshotDirectory(func() *discovery.Snapshot { return snap })
	for _, c := range []struct {
		ns, hostPort string
		want         bool
	}{
		{"dynamo", "10.0.0.4:5557", true},
		{"dynamo", "worker-1.example:5558", true}, // host names compare case-insensitively
		{"prod", "10.0.0.4:5557", false},          // advertised, but in another namespace
		{"dynamo", "10.0.0.4:5558", false},        // another port
		{"dynamo", "10.0.0.5:5557", false},        // not a direct ZMQ channel
		{"dynamo", "10.0.0.6:5557", false},        // not an event-plane topic
		{"prod", "[fd00::7]:5557", true},
		{"", "10.0.0.4:5557", false},
	} {
		if got := d.Advertised(c.ns, c.hostPort); got != c.want {
			t.Errorf("Advertised(%q, %q) = %v, want %v", c.ns, c.hostPort, got, c.want)
		}
	}
	if n := d.Count(); n != 3 {
		t.Errorf("Count = %d, want 3", n)
	}
	empty := SnapshotDirectory(func() *discovery.Snapshot { return nil })
	if empty.Advertised("dynamo", "10.0.0.4:5557") || empty.Count() != 0 {
		t.Error("no snapshot yet must advertise nothing")
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	var pubs publishers
	good := Config{BusURL: "https://127.0.0.1:7443", ClientID: testBroker, Namespaces: []string{"dynamo"}, TLS: nil,
		Directory: pubs.directory()}
	if _, err := New(good); err != nil {
		t.Fatalf("good config refused: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"http url":        func(c *Config) { c.BusURL = "http://127.0.0.1:7443" },
		"url with path":   func(c *Config) { c.BusURL = "https://127.0.0.1:7443/bus" },
		"empty client id": func(c *Config) { c.ClientID = "" },
		"space in id":     func(c *Config) { c.ClientID = "a b" },
		"no namespace":    func(c *Config) { c.Namespaces = nil },
		"bad namespace":   func(c *Config) { c.Namespaces = []string{"dyn\namo"} },
		"no directory":    func(c *Config) { c.Directory = nil },
		"too many namespaces": func(c *Config) {
			c.Namespaces = make([]string, wire.MaxNamespaces+1)
			for i := range c.Namespaces {
				c.Namespaces[i] = "ns" + strings.Repeat("x", i)
			}
		},
	} {
		c := good
		mut(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Bytes cross the tunnel unchanged both ways, larger than every buffer
// and window on the path; the publisher's end reaches the router as the
// end of the stream after its last byte.
func TestRelayIsByteExact(t *testing.T) {
	p := newPKI(t)
	r := startRouter(t, settings(p, "dynamo"), "")
	pub := startPublisher(t)
	var pubs publishers
	pubs.add("dynamo", pub.addr())
	c := agentConfig(p, r, pubs.directory(), "dynamo")
	c.Metrics = NewMetrics()
	runAgent(t, c)
	waitFor(t, "the session to cover dynamo", func() bool { return r.l.Covers("dynamo") })

	type opened struct {
		c   net.Conn
		err error
	}
	res := make(chan opened, 1)
	bt := target(t, "dynamo", pub.addr())
	go func() {
		c, err := r.l.OpenStream(context.Background(), bt)
		res <- opened{c, err}
	}()
	pc := pub.accept(t)
	o := <-res
	if o.err != nil {
		t.Fatal(o.err)
	}
	rc := o.c
	defer rc.Close()

	up := make([]byte, 3<<20+17) // publisher → router
	down := make([]byte, 1<<20+5)
	rand.Read(up)
	rand.Read(down)
	// Router → publisher while publisher → router flows.
	gotDown := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(down))
		_, err := io.ReadFull(pc, b)
		if err != nil {
			b = nil
		}
		gotDown <- b
	}()
	writeErr := make(chan error, 1)
	go func() { _, err := rc.Write(down); writeErr <- err }()
	go func() {
		pc.Write(up)
		// The publisher ends: its write side closes after its last byte.
		pc.(*net.TCPConn).CloseWrite()
	}()
	gotUp, err := io.ReadAll(rc)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatalf("reading the relayed stream: %v", err)
	}
	if !bytes.Equal(gotUp, up) {
		t.Fatalf("publisher → router: got %d bytes, want %d (equal: %v)", len(gotUp), len(up), bytes.Equal(gotUp, up[:min(len(gotUp), len(up))]))
	}
	if err := <-writeErr; err != nil {
		t.Fatalf("router → publisher write: %v", err)
	}
	if b := <-gotDown; !bytes.Equal(b, down) {
		t.Fatalf("router → publisher: bytes differ (got %d)", len(b))
	}
	if got := testutil.ToFloat64(c.Metrics.Bytes.WithLabelValues("to_router")); got != float64(len(up)) {
		t.Errorf("to_router bytes = %v, want %d", got, len(up))
	}
	if got := testutil.ToFloat64(c.Metrics.Bytes.WithLabelValues("to_publisher")); got != float64(len(down)) {
		t.Errorf("to_publisher bytes = %v, want %d", got, len(down))
	}
	if got := opens(c.Metrics, "opened"); got != 1 {
		t.Errorf("opened = %v, want 1", got)
	}
	// The stream's end is forgotten at both ends.
	rc.Close()
	waitFor(t, "the broker to forget the stream", func() bool { return testutil.ToFloat64(c.Metrics.Streams) == 0 })
}

// The router closing a stream (unsubscribe) closes the publisher
// connection.
func TestUnsubscribeClosesThePublisherConnection(t *testing.T) {
	p := newPKI(t)
	r := startRouter(t, settings(p, "dynamo"), "")
	pub := startPublisher(t)
	var pubs publishers
	pubs.add("dynamo", pub.addr())
	c := agentConfig(p, r, pubs.directory(), "dynamo")
	c.Metrics = NewMetrics()
	runAgent(t, c)
	waitFor(t, "the session to cover dynamo", func() bool { return r.l.Covers("dynamo") })
	res := make(chan net.Conn, 1)
	bt := target(t, "dynamo", pub.addr())
	go func() {
		c, err := r.l.OpenStream(context.Background(), bt)
		if err != nil {
			t.Error(err)
		}
		res <- c
	}()
	pc := pub.accept(t)
	rc := <-res
	if rc == nil {
		t.FailNow()
	}
	if got := testutil.ToFloat64(c.Metrics.Streams); got != 1 {
		t.Errorf("streams = %v, want 1", got)
	}
	rc.Close()
	pc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(pc); err != nil {
		t.Fatalf("the publisher connection did not end cleanly: %v", err)
	}
	waitFor(t, "the broker to forget the stream", func() bool { return testutil.ToFloat64(c.Metrics.Streams) == 0 })
}

// openRefused opens t at r and returns the broker's refusal code.
func openRefused(t *testing.T, r *router, bt eventplane.BusTarget) string {
	t.Helper()
	c, err := r.l.OpenStream(context.Background(), bt)
	if err == nil {
		c.Close()
		t.Fatalf("stream to %+v opened", bt)
	}
	var be *eventplane.BusError
	if !errors.As(err, &be) || be.Code != eventplane.BusErrRefused {
		t.Fatalf("want a refusal, got %v", err)
	}
	code, _ := strings.CutPrefix(be.Reason, "the broker refused the stream: ")
	return code
}

// Each subscribe the broker will not serve is answered with its code and
// counted: a target its discovery does not advertise (or advertises in
// another namespace), an advertised publisher it cannot reach, a stream
// over its cap.
func TestSubscribeRefusals(t *testing.T) {
	p := newPKI(t)
	r := startRouter(t, settings(p, "dynamo", "prod"), "")
	pub := startPublisher(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // advertised, but nothing listens there
	var pubs publishers
	pubs.add("dynamo", pub.addr())
	pubs.add("dynamo", deadAddr)
	c := agentConfig(p, r, pubs.directory(), "dynamo", "prod")
	c.Metrics = NewMetrics()
	c.MaxStreams = 1
	runAgent(t, c)
	waitFor(t, "the session to cover both namespaces", func() bool { return r.l.Covers("dynamo") && r.l.Covers("prod") })

	if code := openRefused(t, r, target(t, "dynamo", "127.0.0.1:1")); code != wire.CodeTargetNotAdvertised {
		t.Errorf("unadvertised address: %q", code)
	}
	if code := openRefused(t, r, target(t, "prod", pub.addr())); code != wire.CodeTargetNotAdvertised {
		t.Errorf("advertised in another namespace: %q", code)
	}
	if code := openRefused(t, r, target(t, "dynamo", deadAddr)); code != wire.CodeUnreachable {
		t.Errorf("unreachable publisher: %q", code)
	}
	// One stream is the cap: the first holds it, the second is refused.
	first := make(chan net.Conn, 1)
	bt := target(t, "dynamo", pub.addr())
	go func() {
		c, err := r.l.OpenStream(context.Background(), bt)
		if err != nil {
			t.Error(err)
		}
		first <- c
	}()
	pub.accept(t)
	held := <-first
	if held == nil {
		t.FailNow()
	}
	defer held.Close()
	if code := openRefused(t, r, target(t, "dynamo", pub.addr())); code != CodeTooManyStreams {
		t.Errorf("over the stream cap: %q", code)
	}
	for result, want := range map[string]float64{
		wire.CodeTargetNotAdvertised: 2, wire.CodeUnreachable: 1, CodeTooManyStreams: 1, "opened": 1,
	} {
		if got := opens(c.Metrics, result); got != want {
			t.Errorf("stream_opens_total{result=%q} = %v, want %v", result, got, want)
		}
	}
}

// A draining session serves no new subscribe: shutting_down. The router
// places nothing on a draining session, so this is the session's own
// rule, checked on its own.
func TestDrainingSessionRefusesSubscribe(t *testing.T) {
	var pubs publishers
	pubs.add("dynamo", "127.0.0.1:5557")
	a, err := New(Config{BusURL: "https://127.0.0.1:7443", ClientID: testBroker, Namespaces: []string{"dynamo"},
		Directory: pubs.directory()})
	if err != nil {
		t.Fatal(err)
	}
	s := &session{a: a, out: make(chan wire.Message, 4), ended: make(chan struct{}), streams: map[string]*relay{},
		closedStreams: make(chan string, 1), maxStreams: 4, draining: true}
	s.subscribe(context.Background(), "st-1", wire.Target{Namespace: "dynamo", Host: "127.0.0.1", Port: 5557})
	m := <-s.out
	if m.Type != wire.TypeStreamClosed || m.StreamID != "st-1" || m.Code != wire.CodeShuttingDown {
		t.Fatalf("got %+v", m)
	}
	if len(s.streams) != 0 {
		t.Fatal("a refused stream was kept")
	}
}

// The router's refusal of the session is read from its error body.
func TestSessionRefusals(t *testing.T) {
	p := newPKI(t)
	r := startRouter(t, settings(p, "dynamo"), "")
	var pubs publishers
	for name, c := range map[string]struct {
		mut    func(*Config)
		status int
		code   string
	}{
		"wrong token": {func(c *Config) {
			c.Token = func() (string, error) { return "not-the-token", nil }
		}, 401, wire.CodeUnauthenticated},
		"no credential":               {func(c *Config) { c.Token = nil }, 401, wire.CodeUnauthenticated},
		"namespace outside the grant": {func(c *Config) { c.Namespaces = []string{"dynamo", "prod"} }, 403, wire.CodeForbidden},
		"another client id":           {func(c *Config) { c.ClientID = "broker-b" }, 403, wire.CodeForbidden},
	} {
		cfg := agentConfig(p, r, pubs.directory(), "dynamo")
		cfg.Metrics = NewMetrics()
		c.mut(&cfg)
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		welcomed, err := a.session(context.Background())
		var re *RefusedError
		if welcomed || !errors.As(err, &re) || re.Status != c.status || re.Code != c.code {
			t.Errorf("%s: welcomed=%v err=%v, want %d %s", name, welcomed, err, c.status, c.code)
		}
		if attempts(cfg.Metrics, "refused") != 1 {
			t.Errorf("%s: the refusal was not counted", name)
		}
	}
	// A token that cannot be read is a failed attempt, not a refusal.
	cfg := agentConfig(p, r, pubs.directory(), "dynamo")
	cfg.Metrics = NewMetrics()
	cfg.Token = func() (string, error) { return "", errors.New("secret not mounted") }
	a, _ := New(cfg)
	if _, err := a.session(context.Background()); err == nil || !strings.Contains(err.Error(), "secret not mounted") {
		t.Errorf("unreadable token: %v", err)
	}
	if attempts(cfg.Metrics, "failed") != 1 {
		t.Error("the failed attempt was not counted")
	}
}

// The token is read at every attempt: a rotated token file is picked up
// at the next reconnect.
func TestTokenIsReadAtEveryAttempt(t *testing.T) {
	p := newPKI(t)
	r := startRouter(t, settings(p, "dynamo"), "")
	var pubs publishers
	tokens := make(chan string, 1)
	tokens <- "stale-token"
	cfg := agentConfig(p, r, pubs.directory(), "dynamo")
	cfg.Metrics = NewMetrics()
	cfg.Token = func() (string, error) {
		select {
		case tok := <-tokens:
			return tok, nil
		default:
			return testToken, nil
		}
	}
	runAgent(t, cfg)
	waitFor(t, "a welcome after the refused first attempt", func() bool {
		return r.l.Covers("dynamo") && attempts(cfg.Metrics, "welcomed") == 1
	})
	if attempts(cfg.Metrics, "refused") != 1 || attempts(cfg.Metrics, "welcomed") != 1 {
		t.Errorf("refused=%v welcomed=%v", attempts(cfg.Metrics, "refused"), attempts(cfg.Metrics, "welcomed"))
	}
}

// When the router goes away the agent reconnects, with backoff, to the
// router that comes back on the same address.
func TestReconnectsWhenTheRouterReturns(t *testing.T) {
	p := newPKI(t)
	r := startRouter(t, settings(p, "dynamo"), "")
	var pubs publishers
	cfg := agentConfig(p, r, pubs.directory(), "dynamo")
	cfg.Metrics = NewMetrics()
	runAgent(t, cfg)
	waitFor(t, "the first session", func() bool {
		return r.l.Covers("dynamo") && testutil.ToFloat64(cfg.Metrics.Connected) == 1
	})
	if testutil.ToFloat64(cfg.Metrics.Connected) != 1 {
		t.Error("connected is not 1 during a session")
	}
	r.stop()
	waitFor(t, "the agent to notice", func() bool { return testutil.ToFloat64(cfg.Metrics.Connected) == 0 })
	r2 := startRouter(t, settings(p, "dynamo"), r.addr)
	waitFor(t, "the session at the returned router", func() bool {
		return r2.l.Covers("dynamo") && attempts(cfg.Metrics, "welcomed") == 2
	})
	if got := attempts(cfg.Metrics, "welcomed"); got != 2 {
		t.Errorf("welcomed = %v, want 2", got)
	}
}

// A session superseded by another of the same credential ends with the
// router's error message, and the agent reconnects.
func TestSupersededSessionReconnects(t *testing.T) {
	p := newPKI(t)
	r := startRouter(t, settings(p, "dynamo"), "")
	var pubs publishers
	cfg := agentConfig(p, r, pubs.directory(), "dynamo")
	cfg.Metrics = NewMetrics()
	runAgent(t, cfg)
	waitFor(t, "the first session", func() bool { return attempts(cfg.Metrics, "welcomed") == 1 })
	// A second agent of the same credential takes the entry over; the two
	// then alternate, each welcome superseding the other.
	other := cfg
	other.Metrics = NewMetrics()
	runAgent(t, other)
	waitFor(t, "the first agent to reconnect after being superseded", func() bool {
		return attempts(cfg.Metrics, "welcomed") >= 2
	})
	if !strings.Contains(r.log.String(), "event bus session welcomed") {
		t.Error("router log lacks the welcomes")
	}
}

// The reconnect delay is full jitter under a ceiling that doubles from
// BackoffInitial to BackoffMax and starts over after a stable session.
func TestBackoff(t *testing.T) {
	b := backoff{rng: mrand.New(mrand.NewPCG(1, 2))}
	ceiling := BackoffInitial
	for i := range 12 {
		w := b.next(false, 0)
		if w <= 0 || w > ceiling {
			t.Fatalf("attempt %d: wait %v outside (0, %v]", i, w, ceiling)
		}
		ceiling = min(ceiling*2, BackoffMax)
	}
	if b.ceiling != BackoffMax {
		t.Fatalf("ceiling = %v after many failures, want %v", b.ceiling, BackoffMax)
	}
	// A welcomed but short session does not reset it.
	b.next(true, StableSession-time.Millisecond)
	if b.ceiling != BackoffMax {
		t.Fatalf("a short session reset the ceiling to %v", b.ceiling)
	}
	// A stable one does.
	if w := b.next(true, StableSession); w > BackoffInitial {
		t.Fatalf("after a stable session: wait %v > %v", w, BackoffInitial)
	}
	// The jitter spreads: not every wait is the same.
	seen := map[time.Duration]bool{}
	for range 16 {
		seen[(&backoff{rng: b.rng}).next(false, 0)] = true
	}
	if len(seen) < 8 {
		t.Fatalf("only %d distinct waits of 16", len(seen))
	}
}

// Cancelling Run drains: the router hears draining (the namespace is no
// longer covered), every open stream ends at both ends, the session ends
// cleanly, and Run returns nil.
func TestCancelDrains(t *testing.T) {
	p := newPKI(t)
	r := startRouter(t, settings(p, "dynamo"), "")
	pub := startPublisher(t)
	var pubs publishers
	pubs.add("dynamo", pub.addr())
	cfg := agentConfig(p, r, pubs.directory(), "dynamo")
	cfg.Metrics = NewMetrics()
	_, cancel, done := runAgent(t, cfg)
	waitFor(t, "the session to cover dynamo", func() bool { return r.l.Covers("dynamo") })
	res := make(chan net.Conn, 1)
	bt := target(t, "dynamo", pub.addr())
	go func() {
		c, err := r.l.OpenStream(context.Background(), bt)
		if err != nil {
			t.Error(err)
		}
		res <- c
	}()
	pc := pub.accept(t)
	rc := <-res
	if rc == nil {
		t.FailNow()
	}
	defer rc.Close()
	// Bytes in flight before the drain arrive.
	if _, err := pc.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if _, err := io.ReadFull(rc, buf); err != nil || string(buf) != "last words" {
		t.Fatalf("before the drain: %q %v", buf, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after a drain: %v", err)
		}
		done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the drain")
	}
	// The router's end of the stream ends.
	rc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(rc); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatalf("the relayed stream did not end: %v", err)
	}
	// So does the publisher connection.
	pc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(pc); err != nil {
		t.Fatalf("the publisher connection did not end: %v", err)
	}
	waitFor(t, "the router to forget the session", func() bool { return r.l.SessionCount() == 0 })
	if !strings.Contains(r.log.String(), "event bus session draining") {
		t.Errorf("the router never heard draining:\n%s", r.log.String())
	}
	if testutil.ToFloat64(cfg.Metrics.Connected) != 0 || testutil.ToFloat64(cfg.Metrics.Streams) != 0 {
		t.Error("gauges not back to 0 after the drain")
	}
}

// Cancelling before the router answers abandons the attempt at once: Run
// does not sit out the welcome timeout.
func TestCancelBeforeWelcome(t *testing.T) {
	// A TCP peer that accepts and never speaks TLS.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var pubs publishers
	a, err := New(Config{BusURL: "https://" + ln.Addr().String(), ClientID: testBroker, Namespaces: []string{"dynamo"},
		Directory: pubs.directory()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	c := <-accepted
	defer c.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(WelcomeTimeout - time.Second):
		t.Fatal("Run waited for the welcome timeout after its context ended")
	}
}
