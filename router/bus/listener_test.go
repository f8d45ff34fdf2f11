package bus

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"switchyard/router/bus/wire"
	"switchyard/router/eventplane"
)

func refusals(l *Listener, code string) float64 {
	return testutil.ToFloat64(l.met.Refusals.WithLabelValues(code))
}

func waitChanged(t *testing.T, l *Listener, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the set of sessions did not change")
	}
}

func TestSessionRelaysBytesThroughOpenStream(t *testing.T) {
	p := newPKI(t)
	l, addr := startListener(t, testSettings(p, brokerEntry("broker-a", "tok-a", "dynamo")))
	if l.Covers("dynamo") {
		t.Fatal("covered before any session")
	}
	changed := l.Changed()
	c := newClient(t, p, addr, "tok-a")
	_, s := c.open(brokerHello("broker-a", "dynamo"))
	waitChanged(t, l, changed)
	if !l.Covers("dynamo") || l.Covers("other") {
		t.Fatal("coverage does not follow the hello's namespaces")
	}

	target := eventplane.BusTarget{Namespace: "dynamo", Host: "10.1.2.3", Port: 5557, Topic: "kv@"}
	type opened struct {
		conn net.Conn
		err  error
	}
	res := make(chan opened, 1)
	go func() {
		conn, err := l.OpenStream(context.Background(), target)
		res <- opened{conn, err}
	}()
	sub := s.next(t)
	if sub.Type != wire.TypeSubscribe || sub.Target.Host != "10.1.2.3" || sub.Target.Port != 5557 || sub.Target.Topic != "kv@" {
		t.Fatalf("want subscribe for the target, got %+v", sub)
	}
	resp, err := c.echoStream(sub.StreamID)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("data stream: %v %v", resp, err)
	}
	o := <-res
	if o.err != nil {
		t.Fatal(o.err)
	}
	msg := []byte(strings.Repeat("zmtp bytes ", 10000)) // several frames and window updates
	go o.conn.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(o.conn, got); err != nil {
		t.Fatalf("echo: %v", err)
	}
	if string(got) != string(msg) {
		t.Fatal("echoed bytes differ")
	}
	// A second open of the same commanded stream is a duplicate.
	if dup, err := c.echoStream(sub.StreamID); err != nil || dup.StatusCode != http.StatusConflict || errorCode(t, dup) != wire.CodeDuplicateStream {
		t.Fatalf("duplicate stream: %v %v", dup, err)
	}
	o.conn.Close()
	if m := s.next(t); m.Type != wire.TypeUnsubscribe || m.StreamID != sub.StreamID {
		t.Fatalf("want unsubscribe after Close, got %+v", m)
	}
	if n := testutil.ToFloat64(l.met.Streams); n != 0 {
		t.Fatalf("streams gauge %v after close", n)
	}
}

func TestUnknownStreamAndAnotherBrokersStream(t *testing.T) {
	p := newPKI(t)
	l, addr := startListener(t, testSettings(p, brokerEntry("broker-a", "tok-a", "dynamo"), brokerEntry("broker-b", "tok-b", "dynamo")))
	a := newClient(t, p, addr, "tok-a")
	_, sa := a.open(brokerHello("broker-a", "dynamo"))
	resp, err := a.echoStream("st-0123456789abcdef")
	if err != nil || resp.StatusCode != http.StatusNotFound || errorCode(t, resp) != wire.CodeUnknownStream {
		t.Fatalf("unknown stream: %v %v", resp, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := l.OpenStream(ctx, eventplane.BusTarget{Namespace: "dynamo", Host: "h", Port: 1})
		errc <- err
	}()
	var sub wire.Message
	for sub = sa.next(t); sub.Type != wire.TypeSubscribe; sub = sa.next(t) {
	}
	// Only broker-a was welcomed, so the stream is broker-a's.
	b := newClient(t, p, addr, "tok-b")
	resp, err = b.echoStream(sub.StreamID)
	if err != nil || resp.StatusCode != http.StatusForbidden || errorCode(t, resp) != wire.CodeForbidden {
		t.Fatalf("another broker's stream: %v %v", resp, err)
	}
	// The broker refuses: the opener gets refused.
	sa.send(t, wire.Message{Type: wire.TypeStreamClosed, StreamID: sub.StreamID, Code: wire.CodeTargetNotAdvertised})
	var be *eventplane.BusError
	if err := <-errc; !errors.As(err, &be) || be.Code != eventplane.BusErrRefused || !strings.Contains(be.Reason, wire.CodeTargetNotAdvertised) {
		t.Fatalf("want refused, got %v", err)
	}
	if refusals(l, wire.CodeUnknownStream) != 1 || refusals(l, wire.CodeForbidden) != 1 {
		t.Fatal("refusals not counted by code")
	}
}

func TestPlaintextIsRefused(t *testing.T) {
	p := newPKI(t)
	l, addr := startListener(t, testSettings(p))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /bus/v1/session HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden || errorCode(t, resp) != wire.CodeTLSRequired {
		t.Fatalf("plaintext: %v", resp.Status)
	}
	// A non-letter first byte is closed without an answer.
	c2, _ := net.Dial("tcp", addr)
	defer c2.Close()
	c2.Write([]byte{0x00, 0x01})
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c2.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("binary plaintext: read %d, %v", n, err)
	}
	if refusals(l, wire.CodeTLSRequired) != 2 {
		t.Fatalf("tls_required counted %v times", refusals(l, wire.CodeTLSRequired))
	}
}

func TestTLS12IsRefused(t *testing.T) {
	p := newPKI(t)
	l, addr := startListener(t, testSettings(p))
	_, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.roots, ServerName: "localhost", MaxVersion: tls.VersionTLS12, NextProtos: []string{"h2"}})
	if err == nil {
		t.Fatal("TLS 1.2 handshake succeeded")
	}
	// Without h2 in ALPN the connection is refused too.
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.roots, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err == nil {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil {
		t.Fatal("http/1.1 over TLS was served")
	}
	deadline := time.Now().Add(10 * time.Second)
	for refusals(l, wire.CodeHandshakeFailed) < 2 && time.Now().Before(deadline) {
		runtimeGosched()
	}
	if refusals(l, wire.CodeHandshakeFailed) != 2 {
		t.Fatalf("handshake_failed counted %v times", refusals(l, wire.CodeHandshakeFailed))
	}
}

func TestCredentials(t *testing.T) {
	p := newPKI(t)
	l, addr := startListener(t, testSettings(p,
		brokerEntry("broker-a", "tok-a", "dynamo"), brokerEntry("broker-b", "tok-b", "dynamo"), brokerEntry("broker-c", "", "dynamo")))

	wrong := newClient(t, p, addr, "not-a-token")
	if resp, _ := wrong.open(brokerHello("broker-a", "dynamo")); resp.StatusCode != http.StatusUnauthorized || errorCode(t, resp) != wire.CodeUnauthenticated {
		t.Fatalf("wrong token: %s", resp.Status)
	}
	none := newClient(t, p, addr, "")
	if resp, _ := none.open(brokerHello("broker-a", "dynamo")); resp.StatusCode != http.StatusUnauthorized || errorCode(t, resp) != wire.CodeUnauthenticated {
		t.Fatalf("no credential: %s", resp.Status)
	}
	// Token of broker-a, certificate naming broker-b: forbidden.
	mixed := newClient(t, p, addr, "tok-a", p.clientCert(t, "broker-b"))
	if resp, _ := mixed.open(brokerHello("broker-a", "dynamo")); resp.StatusCode != http.StatusForbidden || errorCode(t, resp) != wire.CodeForbidden {
		t.Fatalf("certificate naming another broker: %s", resp.Status)
	}
	// A certificate alone names broker-c.
	byCert := newClient(t, p, addr, "", p.clientCert(t, "broker-c"))
	byCert.open(brokerHello("broker-c", "dynamo"))
	// Hello naming another client id, or a namespace outside the allowlist.
	b := newClient(t, p, addr, "tok-b")
	if resp, _ := b.open(brokerHello("broker-a", "dynamo")); resp.StatusCode != http.StatusForbidden || errorCode(t, resp) != wire.CodeForbidden {
		t.Fatalf("client_id of another entry: %s", resp.Status)
	}
	if resp, _ := b.open(brokerHello("broker-b", "secret")); resp.StatusCode != http.StatusForbidden || errorCode(t, resp) != wire.CodeForbidden {
		t.Fatalf("namespace outside the allowlist: %s", resp.Status)
	}
	old := &wire.Message{Type: wire.TypeHello, Role: wire.RoleBroker, ClientID: "broker-b", Versions: []int{2}, DynamoNamespaces: []string{"dynamo"}}
	if resp, _ := b.open(old); resp.StatusCode != http.StatusBadRequest || errorCode(t, resp) != wire.CodeUnsupportedVersion {
		t.Fatalf("no common version: %s", resp.Status)
	}

	// Revocation on reload: the live session ends, the token is revoked.
	a := newClient(t, p, addr, "tok-a")
	_, sa := a.open(brokerHello("broker-a", "dynamo"))
	s := testSettings(p, brokerEntry("broker-b", "tok-b", "dynamo"), brokerEntry("broker-c", "", "dynamo"))
	if err := l.Reload(s); err != nil {
		t.Fatal(err)
	}
	if m := sa.next(t); m.Type != wire.TypeError || m.Code != wire.CodeCredentialRevoked {
		t.Fatalf("want error credential_revoked, got %+v", m)
	}
	if resp, _ := a.open(brokerHello("broker-a", "dynamo")); resp.StatusCode != http.StatusUnauthorized || errorCode(t, resp) != wire.CodeCredentialRevoked {
		t.Fatalf("revoked token: %s", resp.Status)
	}
	if l.SessionCount() != 1 {
		t.Fatalf("sessions after revocation: %d, want broker-c's only", l.SessionCount())
	}
}

func TestAdmission(t *testing.T) {
	p := newPKI(t)
	s := testSettings(p, brokerEntry("broker-a", "tok-a", "dynamo"), brokerEntry("broker-b", "tok-b", "dynamo"), brokerEntry("broker-c", "tok-c", "dynamo"))
	s.MaxSessions = 2
	s.HelloTimeout = 300 * time.Millisecond
	l, addr := startListener(t, s)

	// A stalled pre-hello request holds its credential's admission.
	a := newClient(t, p, addr, "tok-a")
	stalled := make(chan *http.Response, 1)
	go func() {
		resp, _ := a.open(nil)
		stalled <- resp
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		pending := l.pending["broker-a"]
		l.mu.Unlock()
		if pending || time.Now().After(deadline) {
			break
		}
		runtimeGosched()
	}
	a2 := newClient(t, p, addr, "tok-a")
	if resp, _ := a2.open(brokerHello("broker-a", "dynamo")); resp.StatusCode != http.StatusTooManyRequests || errorCode(t, resp) != wire.CodeTooManySessions {
		t.Fatalf("second pre-hello request: %s", resp.Status)
	}
	if resp := <-stalled; resp.StatusCode != http.StatusRequestTimeout || errorCode(t, resp) != wire.CodeHelloTimeout {
		t.Fatalf("stalled hello: %s", resp.Status)
	}

	// max_sessions.
	newClient(t, p, addr, "tok-a").open(brokerHello("broker-a", "dynamo"))
	bc := newClient(t, p, addr, "tok-b")
	_, sb := bc.open(brokerHello("broker-b", "dynamo"))
	if resp, _ := newClient(t, p, addr, "tok-c").open(brokerHello("broker-c", "dynamo")); resp.StatusCode != http.StatusTooManyRequests || errorCode(t, resp) != wire.CodeTooManySessions {
		t.Fatalf("third session over max_sessions 2: %s", resp.Status)
	}
	// A new session of the same entry supersedes the old one.
	newClient(t, p, addr, "tok-b").open(brokerHello("broker-b", "dynamo"))
	if m := sb.next(t); m.Type != wire.TypeError || m.Code != wire.CodeSessionSuperseded {
		t.Fatalf("want session_superseded, got %+v", m)
	}
	if l.SessionCount() != 2 {
		t.Fatalf("sessions: %d", l.SessionCount())
	}
}

func TestOpenStreamErrors(t *testing.T) {
	p := newPKI(t)
	s := testSettings(p, brokerEntry("broker-a", "tok-a", "dynamo"))
	s.OpenTimeout = 200 * time.Millisecond
	l, addr := startListener(t, s)
	var be *eventplane.BusError
	if _, err := l.OpenStream(context.Background(), eventplane.BusTarget{Namespace: "dynamo", Host: "h"}); !errors.As(err, &be) || be.Code != eventplane.BusErrInvalidTarget {
		t.Fatalf("want invalid_target, got %v", err)
	}
	if _, err := l.OpenStream(context.Background(), eventplane.BusTarget{Namespace: "dynamo", Host: "h", Port: 1}); !errors.As(err, &be) || be.Code != eventplane.BusErrNoSession {
		t.Fatalf("want no_session, got %v", err)
	}
	_, sa := newClient(t, p, addr, "tok-a").open(brokerHello("broker-a", "dynamo"))
	if _, err := l.OpenStream(context.Background(), eventplane.BusTarget{Namespace: "dynamo", Host: "h", Port: 1}); !errors.As(err, &be) || be.Code != eventplane.BusErrOpenTimeout {
		t.Fatalf("want open_timeout, got %v", err)
	}
	if m := sa.next(t); m.Type != wire.TypeSubscribe {
		t.Fatalf("want subscribe, got %+v", m)
	}
	if m := sa.next(t); m.Type != wire.TypeUnsubscribe {
		t.Fatalf("want unsubscribe after the timeout, got %+v", m)
	}
	// Draining: no new placements.
	changed := l.Changed()
	sa.send(t, wire.Message{Type: wire.TypeDraining})
	waitChanged(t, l, changed)
	if l.Covers("dynamo") {
		t.Fatal("a draining session still covers")
	}
}

func TestStreamBuffer(t *testing.T) {
	for _, c := range []struct {
		session int64
		streams int
		want    int
	}{
		{64 << 20, 1024, 16 << 10},
		{64 << 20, 1, 1 << 20},
		{64 << 20, 8, 1 << 20},
		{64 << 20, 64, 256 << 10},
		{1024 * 64 << 10, 1024, 16 << 10},
	} {
		if got := StreamBuffer(c.session, c.streams); got != c.want {
			t.Errorf("StreamBuffer(%d, %d) = %d, want %d", c.session, c.streams, got, c.want)
		}
	}
	if ConnectionLimit(1) != 16 || ConnectionLimit(64) != 256 {
		t.Error("connection limit is 4 × max_sessions, at least 16")
	}
}
