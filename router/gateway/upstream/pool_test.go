package upstream

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pipeConn is a pooled connection over an in-memory pipe; closed reports
// whether the pool closed it.
func pipeConn(t *testing.T, key string) (*conn, func() bool) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	closed := func() bool { return a.SetReadDeadline(time.Time{}) != nil }
	return newConn(a, key), closed
}

func TestPoolCapsIdleConnectionsPerHost(t *testing.T) {
	p := newPool()
	defer p.closeIdle()
	var lastClosed func() bool
	for range maxIdlePerHost + 1 {
		c, closed := pipeConn(t, "a:80")
		p.put(c)
		lastClosed = closed
	}
	require.Equal(t, maxIdlePerHost, p.idleCount("a:80"))
	require.True(t, lastClosed(), "the connection past the cap is closed")
	other, _ := pipeConn(t, "b:80")
	p.put(other)
	require.Equal(t, 1, p.idleCount("b:80"))
}

func TestPoolHandsOutTheNewestAndExpiresTheIdle(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	p := newPool()
	p.now = func() time.Time { return now }
	defer p.closeIdle()
	old, oldClosed := pipeConn(t, "a:80")
	p.put(old)
	now = now.Add(idleTimeout / 2)
	fresh, freshClosed := pipeConn(t, "a:80")
	p.put(fresh)

	got := p.get("a:80")
	require.Same(t, fresh, got)
	require.True(t, got.reused)
	p.put(got)

	now = now.Add(idleTimeout/2 + time.Second) // old is past its idle time, fresh is not
	p.closeExpired()
	require.Equal(t, 1, p.idleCount("a:80"))
	require.True(t, oldClosed())
	require.False(t, freshClosed())
	require.Same(t, fresh, p.get("a:80"))
	require.Nil(t, p.get("a:80"))
}
