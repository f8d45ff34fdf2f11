package etcdsource

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/internal/etcdtest"
	"switchyard/router/clock"
	"switchyard/router/events"
)

// TestTLSAndPasswordAuth runs against a member that requires a client
// certificate from its CA and has auth enabled; the watcher's account may
// only read v1/, the shape a production router account should have.
func TestTLSAndPasswordAuth(t *testing.T) {
	srv, files := etcdtest.StartTLS(t, etcdtest.TLSOptions{ClientCertAuth: true})
	require.True(t, strings.HasPrefix(srv.Endpoint(), "https://"))
	srv.EnableAuth(t, "root-secret")
	srv.AddReader(t, "router", "router-secret", "v1/")
	c := srv.Client(t)
	want := fleet("dynamo", workerID)
	put(t, c, want)

	cfg := fastBackoff(Config{
		Endpoints:  []string{srv.Endpoint()},
		Namespaces: []string{"dynamo"},
		TLS: &TLS{
			CAFile:     files.CAFile,
			CertFile:   files.ClientCertFile,
			KeyFile:    files.ClientKeyFile,
			ServerName: files.ServerName,
		},
		Username: "router",
	})

	t.Run("wrong password", func(t *testing.T) {
		bad := cfg
		bad.Password = "not-the-password"
		h := startWatcher(t, bad, clock.Real{}, nil)
		eventually(t, 20*time.Second, "connect_failed", func() bool { return h.counts.get(KindConnectFailed) >= 2 })
		assert.Empty(t, h.sink.all(), "no snapshot without authentication")
		assert.Zero(t, h.counts.get(KindResync))
		assert.Zero(t, h.sink.connectedTimes())
		st := h.w.Status()
		assert.Contains(t, st.LastError, "authentication failed")
		assert.NotContains(t, st.LastError, "127.0.0.1")
		assert.NotContains(t, st.LastError, "not-the-password")
	})

	t.Run("reader account", func(t *testing.T) {
		good := cfg
		good.Password = "router-secret"
		h := startWatcher(t, good, clock.Real{}, nil)
		eventually(t, 20*time.Second, "connected", h.sink.isConnected)
		rs, ok := h.sink.lastResync("dynamo")
		require.True(t, ok)
		assert.Equal(t, want, asMap(rs.Records))

		// The watches are authorized too: a live put arrives.
		k, v := endpointRecord("dynamo", "prefill", 42)
		put(t, c, map[string]string{k: v})
		eventually(t, 10*time.Second, "live put", func() bool {
			for _, e := range h.sink.all() {
				if p, ok := e.(events.DiscoveryPut); ok && p.Key == k {
					return true
				}
			}
			return false
		})
		assert.Zero(t, h.counts.get(KindConnectFailed))
	})
}

// TestTLSWithoutClientCertificateFails shows the certificate settings are
// really used: the same member refuses a watcher that presents none.
func TestTLSWithoutClientCertificateFails(t *testing.T) {
	srv, files := etcdtest.StartTLS(t, etcdtest.TLSOptions{ClientCertAuth: true})
	cfg := fastBackoff(Config{
		Endpoints:  []string{srv.Endpoint()},
		Namespaces: []string{"dynamo"},
		TLS:        &TLS{CAFile: files.CAFile, ServerName: files.ServerName},
	})
	h := startWatcher(t, cfg, clock.Real{}, nil)
	eventually(t, 30*time.Second, "connect_failed", func() bool { return h.counts.get(KindConnectFailed) >= 1 })
	assert.Zero(t, h.counts.get(KindResync))
}
