package bus

import (
	"net"
	"testing"
	"time"

	"switchyard/internal/testpki"
	"switchyard/router/config"
)

// A listen address that is busy at reload keeps the old one serving and
// is retried until it binds; disabling closes the listener and wakes
// waiters on Changed, and enabling again starts a new one.
func TestHostRebindRetriesAndToggles(t *testing.T) {
	p := newPKI(t)
	cert, key := testpki.WriteKeyPair(t, p.server)
	c := config.EventBus{
		Enabled: true, Listen: "127.0.0.1:0", TLS: config.BusTLS{Cert: cert, Key: key},
		Brokers:     []config.BusClient{brokerEntry("broker-a", "tok-a", "dynamo")},
		MaxSessions: 4, MaxStreamsPerSession: 4, MaxSessionBufferBytes: 4 * 64 << 10,
		HeartbeatInterval: config.Duration(time.Second), IdleTimeout: config.Duration(5 * time.Second),
	}
	h := startHost(c, nil, nil, 20*time.Millisecond)
	defer h.Close()
	waitFor(t, "the listener", func() bool { return h.Addr() != "" })
	first := h.Addr()
	_, s := newClient(t, p, first, "tok-a").open(brokerHello("broker-a", "dynamo"))

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.Listen = busy.Addr().String()
	h.Reload(c)
	if h.Addr() != first {
		t.Fatalf("a failed rebind moved the listener to %q", h.Addr())
	}
	newClient(t, p, first, "tok-a").open(brokerHello("broker-a", "dynamo")) // still accepting; supersedes s
	if m := s.next(t); m.Code != "session_superseded" {
		t.Fatalf("want session_superseded, got %+v", m)
	}
	busy.Close()
	waitFor(t, "the retried rebind", func() bool { return h.Addr() == c.Listen })

	// Disabled: Changed wakes, nothing covers; enabled again: a new listener.
	changed := h.Changed()
	c.Enabled = false
	h.Reload(c)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("Changed did not wake when the listener closed")
	}
	if h.Addr() != "" || h.Covers("dynamo") || h.Sessions("dynamo") != 0 {
		t.Fatal("a disabled host still listens or covers")
	}
	started := h.Changed()
	c.Enabled = true
	h.Reload(c)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("Changed did not wake when the listener started again")
	}
	newClient(t, p, h.Addr(), "tok-a").open(brokerHello("broker-a", "dynamo"))
	if h.Sessions("dynamo") != 1 {
		t.Fatalf("sessions %d after re-enabling", h.Sessions("dynamo"))
	}
}
