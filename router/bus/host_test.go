package bus

import (
	"net"
	"testing"
	"time"

	"switchyard/internal/testpki"
	"switchyard/router/config"
)

// A port in use at start-up: the host retries and starts once it is free;
// a reload of brokers reaches the running listener.
func TestHostRetriesStartAndReloads(t *testing.T) {
	p := newPKI(t)
	cert, key := testpki.WriteKeyPair(t, p.server)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := config.EventBus{
		Enabled: true, Listen: busy.Addr().String(), TLS: config.BusTLS{Cert: cert, Key: key},
		Brokers:     []config.BusClient{brokerEntry("broker-a", "tok-a", "dynamo")},
		MaxSessions: 4, MaxStreamsPerSession: 4, MaxSessionBufferBytes: 4 * 64 << 10,
		HeartbeatInterval: config.Duration(time.Second), IdleTimeout: config.Duration(5 * time.Second),
	}
	h := startHost(c, nil, nil, 20*time.Millisecond)
	defer h.Close()
	started := h.Changed()
	busy.Close()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the host did not start once the port was free")
	}
	cl := newClient(t, p, c.Listen, "tok-a")
	_, s := cl.open(brokerHello("broker-a", "dynamo"))
	changed := h.Changed()
	c.Brokers = nil
	h.Reload(c)
	waitChanged(t, h.Listener(), changed)
	if m := s.next(t); m.Code != "credential_revoked" {
		t.Fatalf("want credential_revoked after the reload, got %+v", m)
	}
}
