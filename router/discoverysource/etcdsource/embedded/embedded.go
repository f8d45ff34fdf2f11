// Package embedded runs a single-member etcd server inside the process.
//
// The demo and `serve --embedded-etcd` use it so a laptop needs no separate
// etcd; tests use it (through internal/etcdtest) so discovery is exercised
// against the real server rather than a fake. It is the only place in the
// project that starts an etcd server.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// DefaultReadyTimeout bounds how long Start waits for the member to serve.
const DefaultReadyTimeout = 30 * time.Second

// Options describes one embedded member. The zero values of the optional
// fields give a plaintext member with etcd's defaults.
type Options struct {
	// Dir holds the member's data; reusing it restarts with the same keys.
	Dir string
	// ClientAddr is the client listen address, host:port. Port 0 picks a
	// free port, which Embedded.Options reports back. An empty host means
	// 127.0.0.1, not every interface: the member has no auth, so exposing
	// it must be a deliberate choice.
	ClientAddr string
	// PeerAddr is the raft peer address, host:port. Empty or port 0 picks a
	// free port on the client host. Nothing connects to it (one member), but
	// etcd needs one to name the member.
	PeerAddr string
	// TLS, when set, serves clients over TLS.
	TLS *TLS
	// NoFsync trades durability for speed; only tests should set it.
	NoFsync bool
	// BcryptCost overrides the password hashing cost (0 = etcd default).
	// Tests lower it so enabling auth does not dominate their run time.
	BcryptCost uint
	// ReadyTimeout bounds the wait for the member to serve (0 = default).
	ReadyTimeout time.Duration
}

// TLS is the server side of client TLS, as file paths.
type TLS struct {
	CertFile, KeyFile string
	// CAFile verifies client certificates; with ClientCertAuth set, a client
	// without a certificate signed by it is refused.
	CAFile         string
	ClientCertAuth bool
}

// Embedded is a running member.
type Embedded struct {
	opts     Options
	endpoint string
	etcd     *embed.Etcd
	once     sync.Once
}

// StartEmbedded starts a plaintext member storing its data in dir and
// serving clients on listen (host:port; port 0 picks a free port).
func StartEmbedded(dir, listen string) (*Embedded, error) {
	return Start(Options{Dir: dir, ClientAddr: listen})
}

// Start starts a member and waits until it serves or ReadyTimeout passes.
// Ports left 0 are picked free; if another process takes one before etcd
// binds it, Start picks again (up to portAttempts times).
func Start(o Options) (*Embedded, error) {
	if o.Dir == "" {
		return nil, errors.New("embedded etcd: data dir is required")
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	for attempt := 1; ; attempt++ {
		e, err := start(o)
		if err == nil || attempt == portAttempts || !errors.Is(err, syscall.EADDRINUSE) || !picksPorts(o) {
			return e, err
		}
	}
}

// portAttempts bounds Start's retries when a picked port was taken.
const portAttempts = 5

// picksPorts reports whether Start picks a port for o.
func picksPorts(o Options) bool {
	return portZero(o.ClientAddr) || portZero(o.PeerAddr)
}

func portZero(addr string) bool {
	if addr == "" {
		return true
	}
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

func start(o Options) (*Embedded, error) {
	var err error
	if o.ClientAddr, err = resolvePort(o.ClientAddr, "127.0.0.1"); err != nil {
		return nil, fmt.Errorf("embedded etcd: client address: %w", err)
	}
	host, _, _ := net.SplitHostPort(o.ClientAddr)
	if o.PeerAddr, err = resolvePort(o.PeerAddr, host); err != nil {
		return nil, fmt.Errorf("embedded etcd: peer address: %w", err)
	}

	scheme := "http"
	if o.TLS != nil {
		scheme = "https"
	}
	clientURL := url.URL{Scheme: scheme, Host: o.ClientAddr}
	peerURL := url.URL{Scheme: "http", Host: o.PeerAddr}

	cfg := embed.NewConfig()
	cfg.Dir = o.Dir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// etcd's own logs are noise next to the router's; its failures surface
	// through Start's error and Err instead.
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = o.NoFsync
	if o.BcryptCost > 0 {
		cfg.BcryptCost = o.BcryptCost
	}
	if o.TLS != nil {
		cfg.ClientTLSInfo = transport.TLSInfo{
			CertFile:       o.TLS.CertFile,
			KeyFile:        o.TLS.KeyFile,
			TrustedCAFile:  o.TLS.CAFile,
			ClientCertAuth: o.TLS.ClientCertAuth,
		}
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: start: %w", err)
	}
	timer := time.NewTimer(o.ReadyTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-timer.C:
		e.Close()
		return nil, fmt.Errorf("embedded etcd: not ready after %s", o.ReadyTimeout)
	}
	return &Embedded{opts: o, endpoint: clientURL.String(), etcd: e}, nil
}

// Endpoint is the client URL, e.g. http://127.0.0.1:2379.
func (e *Embedded) Endpoint() string { return e.endpoint }

// Options returns the options the member runs with, free ports resolved,
// so the caller can start it again on the same addresses and data.
func (e *Embedded) Options() Options { return e.opts }

// Err reports a fatal server error after start.
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }

// Close stops the member and releases its ports; safe to call twice.
func (e *Embedded) Close() {
	e.once.Do(e.etcd.Close)
}

// resolvePort fills an empty host with defHost and replaces port 0 by a
// port that was free a moment ago. etcd needs concrete URLs to advertise,
// so it cannot simply be handed ":0"; another process may take the port
// first, and Start then picks again.
func resolvePort(addr, defHost string) (string, error) {
	host, port := defHost, "0"
	if addr != "" {
		var err error
		if host, port, err = net.SplitHostPort(addr); err != nil {
			return "", err
		}
		if host == "" {
			host = defHost
		}
	}
	if port != "0" {
		return net.JoinHostPort(host, port), nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
