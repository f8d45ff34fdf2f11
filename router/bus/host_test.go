package bus

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"encoding/pem"

	"crypto/x509"

	"switchyard/router/config"
)

func writePEM(t *testing.T, dir string, p *pki) (cert, key string) {
	t.Helper()
	cert, key = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	kd, err := x509.MarshalPKCS8PrivateKey(p.server.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.server.Certificate[0]}), 0o600)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600)
	return cert, key
}

// A port in use at start-up: the host retries and starts once it is free;
// a reload of brokers reaches the running listener.
func TestHostRetriesStartAndReloads(t *testing.T) {
	p := newPKI(t)
	cert, key := writePEM(t, t.TempDir(), p)
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
