package gateway

import (
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"switchyard/router/config"
	upstreamhttp "switchyard/router/gateway/upstream"
)

// newTransport is net/http's upstream HTTP/1.1 client transport, for
// https:// backends and for every backend under
// gateway.upstream_client: net/http. Inference traffic is many concurrent
// long requests to a few hosts, so idle connections are kept per host
// well beyond net/http's default of 2; otherwise every burst would open
// (and then close) fresh connections.
func newTransport() *http.Transport {
	return &http.Transport{
		// Backends are addressed directly; an environment proxy meant for
		// outbound internet traffic must not capture in-cluster calls.
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// Response heads are small; a backend sending megabytes of headers
		// is broken or hostile.
		MaxResponseHeaderBytes: 64 << 10,
		// Bytes are relayed as they arrive: no transparent gzip, which
		// would also drop Content-Length and buffer SSE.
		DisableCompression: true,
		// A custom dialer leaves HTTP/2 off unless forced; frontends speak
		// HTTP/1.1, and one TCP connection per stream isolates slow streams.
		ForceAttemptHTTP2: false,
		ReadBufferSize:    32 << 10,
		WriteBufferSize:   32 << 10,
	}
}

// upstreams sends each upstream request (probes included) through the
// client gateway.upstream_client names: the builtin one, which writes and
// reads on the caller's goroutine and hands https:// to net/http, or
// net/http's for everything.
type upstreams struct {
	std     *http.Transport
	builtin *upstreamhttp.Transport
	useStd  atomic.Bool
}

func newUpstreams() *upstreams {
	std := newTransport()
	return &upstreams{std: std, builtin: upstreamhttp.New(std)}
}

// configure follows a (re)loaded configuration; requests already sent
// finish on the client they started with.
func (u *upstreams) configure(g config.Gateway) {
	u.useStd.Store(g.UpstreamClient == config.UpstreamClientNetHTTP)
}

func (u *upstreams) RoundTrip(req *http.Request) (*http.Response, error) {
	if u.useStd.Load() {
		return upstreamhttp.RoundTripWith(u.std, req)
	}
	return u.builtin.RoundTrip(req)
}

// heads is the builtin client when it serves requests, for the sends it
// takes as a rendered Head; nil while net/http's client is configured.
func (u *upstreams) heads() *upstreamhttp.Transport {
	if u.useStd.Load() {
		return nil
	}
	return u.builtin
}

// CloseIdleConnections closes both clients' idle connections.
func (u *upstreams) CloseIdleConnections() { u.builtin.CloseIdleConnections() }
