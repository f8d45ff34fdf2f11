package server

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"

	"switchyard/internal/testpki"
	"switchyard/router/admin"
	"switchyard/router/bus/wire"
	"switchyard/router/config"
)

// busCerts writes a CA's certificate for 127.0.0.1 and localhost and its
// key, and returns the files and a pool trusting the CA.
func busCerts(t *testing.T) (cert, key string, roots *x509.CertPool) {
	t.Helper()
	ca, cert, key := testpki.ServerFiles(t, "bus CA")
	return cert, key, ca.Pool
}

func busTokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// busSession is a broker's control channel over real TLS 1.3 and HTTP/2.
type busSession struct {
	resp  *http.Response
	out   *io.PipeWriter
	lines chan wire.Message
}

// openBusSession sends hello for id; a refusal returns its status and code.
func openBusSession(t *testing.T, roots *x509.CertPool, addr, token, id string, namespaces ...string) (*busSession, int, string) {
	t.Helper()
	tr := &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS13}}
	t.Cleanup(tr.CloseIdleConnections)
	pr, pw := io.Pipe()
	go func() {
		b, _ := wire.Append(nil, &wire.Message{Type: wire.TypeHello, Role: wire.RoleBroker, ClientID: id,
			Versions: []int{1}, DynamoNamespaces: namespaces})
		pw.Write(b)
	}()
	req, err := http.NewRequest(http.MethodPost, "https://"+addr+wire.SessionPath, pr)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(wire.VersionHeader, "1")
	resp, err := (&http.Client{Transport: tr, Timeout: 0}).Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { pw.Close(); resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		var e wire.ErrorBody
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = json.Unmarshal(b, &e)
		return nil, resp.StatusCode, e.Error.Code
	}
	s := &busSession{resp: resp, out: pw, lines: make(chan wire.Message, 64)}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var m wire.Message
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Type != wire.TypeHeartbeat {
				s.lines <- m
			}
		}
	}()
	m := <-s.lines
	require.Equal(t, wire.TypeWelcome, m.Type)
	return s, http.StatusOK, ""
}

// ended waits for the session's last line, an error with code.
func (s *busSession) ended(t *testing.T) string {
	t.Helper()
	var last wire.Message
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m, ok := <-s.lines:
			if !ok {
				return last.Code
			}
			last = m
		case <-timeout:
			t.Fatal("the session did not end")
		}
	}
}

// alive checks the session answers a heartbeat.
func (s *busSession) alive(t *testing.T, seq uint64) {
	t.Helper()
	b, _ := wire.Append(nil, &wire.Message{Type: wire.TypeHeartbeat, Seq: seq})
	_, err := s.out.Write(b)
	require.NoError(t, err)
	select {
	case m, ok := <-s.lines:
		require.True(t, ok, "the session ended")
		require.Equal(t, wire.TypeHeartbeatAck, m.Type)
		require.Equal(t, seq, m.Seq)
	case <-time.After(20 * time.Second):
		t.Fatal("no heartbeat_ack")
	}
}

func refused(t *testing.T, addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// Every dynamo.event_bus field applies through Server.Reload without a
// restart and without touching discovery: enabling starts the listener, a
// new listen address rebinds it (live sessions carry on), a replaced token
// is credential_revoked for the live session and new requests, a narrowed
// allowlist closes the session it no longer fits with forbidden, and
// disabling closes the listener.
func TestEventBusReloadsLive(t *testing.T) {
	cert, key, roots := busCerts(t)
	cfg := embeddedConfig("tok")
	srv, err := New(cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer srv.Close()
	base := "http://" + srv.Addr()
	gen, restarts := srv.Registry().Generation(), srv.Discovery().Restarts()
	require.Empty(t, srv.eventBus.Addr(), "disabled: no listener")

	withBus := func(listen string, mut func(b *config.EventBus)) *config.Config {
		c := embeddedConfig("tok")
		b := &c.Dynamo.EventBus
		b.Enabled, b.Listen = true, listen
		b.TLS = config.BusTLS{Cert: cert, Key: key}
		b.Brokers = []config.BusClient{
			{ID: "broker-a", Role: config.BusRoleBroker, TokenHash: busTokenHash("tok-a"), Namespaces: []string{"dynamo"}},
			{ID: "broker-b", Role: config.BusRoleBroker, TokenHash: busTokenHash("tok-b"), Namespaces: []string{"dynamo", "other"}},
		}
		if mut != nil {
			mut(b)
		}
		return c
	}

	// Enabled by a reload.
	first := freeAddr(t)
	require.NoError(t, srv.Reload(withBus(first, nil)))
	require.Equal(t, first, srv.eventBus.Addr())
	a, status, code := openBusSession(t, roots, first, "tok-a", "broker-a", "dynamo")
	require.Equal(t, http.StatusOK, status, code)
	eventually(t, "the namespace covered", func() bool {
		_, m := get(t, base+"/metrics", "")
		return strings.Contains(string(m), `switchyard_event_bus_sessions{role="broker"} 1`)
	})

	// A new listen address: bound at once, the old socket closed, the live
	// session (on a connection accepted before) carries on.
	second := freeAddr(t)
	require.NoError(t, srv.Reload(withBus(second, nil)))
	require.Equal(t, second, srv.eventBus.Addr())
	require.True(t, refused(t, first), "the old address still accepts")
	a.alive(t, 1)
	b, status, code := openBusSession(t, roots, second, "tok-b", "broker-b", "dynamo", "other")
	require.Equal(t, http.StatusOK, status, code)

	// broker-a's token replaced: its live session ends credential_revoked,
	// and the old token is answered credential_revoked.
	require.NoError(t, srv.Reload(withBus(second, func(e *config.EventBus) { e.Brokers[0].TokenHash = busTokenHash("tok-a2") })))
	require.Equal(t, wire.CodeCredentialRevoked, a.ended(t))
	_, status, code = openBusSession(t, roots, second, "tok-a", "broker-a", "dynamo")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Equal(t, wire.CodeCredentialRevoked, code)
	_, status, code = openBusSession(t, roots, second, "tok-a2", "broker-a", "dynamo")
	require.Equal(t, http.StatusOK, status, code)

	// broker-b's allowlist narrowed below what it declared: forbidden.
	require.NoError(t, srv.Reload(withBus(second, func(e *config.EventBus) {
		e.Brokers[0].TokenHash = busTokenHash("tok-a2")
		e.Brokers[1].Namespaces = []string{"dynamo"}
	})))
	require.Equal(t, wire.CodeForbidden, b.ended(t))

	// Disabled: the listener closes.
	require.NoError(t, srv.Reload(embeddedConfig("tok")))
	require.Empty(t, srv.eventBus.Addr())
	require.True(t, refused(t, second), "a disabled listener still accepts")

	_, m := get(t, base+"/metrics", "")
	require.Contains(t, string(m), `switchyard_event_bus_refusals_total{code="credential_revoked"} 2`)
	require.Contains(t, string(m), `switchyard_event_bus_refusals_total{code="forbidden"} 1`)
	require.Equal(t, gen, srv.Registry().Generation(), "the registry was not touched")
	require.Equal(t, restarts, srv.Discovery().Restarts(), "discovery was not restarted")
}

// Started with the broker transport and the event bus on, the
// subscriptions' bus and the coverage report are the running listener's
// from the start: a broker session shows in broker_coverage and the gauge.
func TestBrokerTransportUsesTheListenerFromStart(t *testing.T) {
	cert, key, roots := busCerts(t)
	cfg := embeddedConfig("tok")
	cfg.Dynamo.Load.Transport = config.TransportBroker
	b := &cfg.Dynamo.EventBus
	b.Enabled, b.Listen = true, freeAddr(t)
	b.TLS = config.BusTLS{Cert: cert, Key: key}
	b.Brokers = []config.BusClient{{ID: "broker-a", Role: config.BusRoleBroker, TokenHash: busTokenHash("tok-a"), Namespaces: []string{"dynamo"}}}
	srv, err := New(cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer srv.Close()
	base := "http://" + srv.Addr()
	eventually(t, "the listener", func() bool { return srv.eventBus.Addr() != "" })
	_, status, code := openBusSession(t, roots, b.Listen, "tok-a", "broker-a", "dynamo")
	require.Equal(t, http.StatusOK, status, code)
	eventually(t, "the session in broker_coverage", func() bool {
		_, raw := get(t, base+"/admin/dynamo/workers", "tok")
		var body struct {
			Coverage []admin.BrokerCoverageJSON `json:"broker_coverage"`
		}
		_ = json.Unmarshal(raw, &body)
		return len(body.Coverage) == 1 && body.Coverage[0].Namespace == "dynamo" && body.Coverage[0].Sessions == 1
	})
	eventually(t, "the gauges", func() bool {
		_, m := get(t, base+"/metrics", "")
		return strings.Contains(string(m), `switchyard_dynamo_broker_namespace_sessions{namespace="dynamo"} 1`) &&
			strings.Contains(string(m), `switchyard_dynamo_broker_subscriptions{broker="broker-a",family="kv_metrics"} 0`)
	})
}
