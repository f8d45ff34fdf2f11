package etcdsource

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/clock"
)

func TestRunRefusesUnusableConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no endpoints":       {Namespaces: []string{"dynamo"}},
		"no namespaces":      {Endpoints: []string{"http://127.0.0.1:1"}},
		"empty namespace":    {Endpoints: []string{"http://127.0.0.1:1"}, Namespaces: []string{""}},
		"slash in namespace": {Endpoints: []string{"http://127.0.0.1:1"}, Namespaces: []string{"a/b"}},
		"repeated namespace": {Endpoints: []string{"http://127.0.0.1:1"}, Namespaces: []string{"a", "a"}},
	} {
		t.Run(name, func(t *testing.T) {
			err := New(cfg, &recorder{}, clock.Real{}, nil, nil).Run(context.Background())
			assert.Error(t, err)
		})
	}
}

func TestTLSConfig(t *testing.T) {
	plain, err := Config{Endpoints: []string{"http://a:2379"}}.tlsConfig()
	require.NoError(t, err)
	assert.Nil(t, plain, "http:// without a tls block is plaintext")

	sys, err := Config{Endpoints: []string{"https://a:2379"}}.tlsConfig()
	require.NoError(t, err)
	require.NotNil(t, sys, "https:// without a tls block still uses TLS")
	assert.Nil(t, sys.RootCAs, "system roots")

	_, err = Config{TLS: &TLS{CAFile: "/nonexistent/ca.pem"}}.tlsConfig()
	assert.Error(t, err)
}

// TestUnreachableEndpointFailsFast: with nothing listening the channel goes
// to TransientFailure and the pass ends without waiting for the 30 s seed
// timeout, so the backoff (not the timeout) paces the retries.
func TestUnreachableEndpointFailsFast(t *testing.T) {
	l := freeAddr(t)
	h := startWatcher(t, fastBackoff(Config{Endpoints: []string{"http://" + l}, Namespaces: []string{"dynamo"}}), clock.Real{}, nil)
	eventually(t, 10*time.Second, "two connect failures", func() bool { return h.counts.get(KindConnectFailed) >= 2 })
	st := h.w.Status()
	assert.False(t, st.Connected)
	assert.NotContains(t, st.LastError, l)
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
