// Package bus is the router's event-bus listener: the inbound HTTP/2 over
// TLS port that in-cluster brokers and kv_listeners dial out to, their
// sessions, and the command API (eventplane.Bus) the subscription
// supervisors open relayed streams through. The wire contract is in
// router/bus/wire.
package bus

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"switchyard/router/config"
)

// Fixed timings of the listener.
const (
	// HandshakeTimeout bounds the TLS handshake (handshake_timeout).
	HandshakeTimeout = 10 * time.Second
	// PeekTimeout bounds the wait for a connection's first byte.
	PeekTimeout = HandshakeTimeout
	// HelloTimeout bounds the wait for hello on a session request.
	HelloTimeout = 10 * time.Second
	// AuthTimeout is how long a TLS connection may go without an accepted
	// (2xx) session or stream request (auth_timeout).
	AuthTimeout = 10 * time.Second
	// Linger is how long a connection stays open after its last request.
	Linger = 30 * time.Second
	// PingInterval is the HTTP/2 keepalive: a PING after this long without
	// a frame from the client.
	PingInterval = 20 * time.Second
	// PingTimeout is how long an unanswered keepalive PING waits before
	// the connection is closed.
	PingTimeout = 15 * time.Second
	// OpenTimeout bounds OpenStream's wait for the client's data stream.
	OpenTimeout = 30 * time.Second
	// RevokedRing is how many removed credentials are remembered, so their
	// use is answered credential_revoked rather than unauthenticated.
	RevokedRing = 256
	// MinConnections is the floor of the connection cap (4 × max_sessions).
	MinConnections = 16
	// writeTimeout bounds one write of a control message.
	writeTimeout = 10 * time.Second
)

// Per-stream buffer clamp (each of a stream's four reservations).
const (
	MinStreamBuffer = 16 << 10
	MaxStreamBuffer = 1 << 20
)

// Settings are what the listener runs with; FromConfig makes them from
// dynamo.event_bus. Zero timings take the constants above (tests shorten
// them).
type Settings struct {
	Brokers               []config.BusClient
	Certificate           tls.Certificate
	ClientCAPEM           []byte
	MaxSessions           int
	MaxStreamsPerSession  int
	MaxSessionBufferBytes int64
	HeartbeatInterval     time.Duration
	IdleTimeout           time.Duration

	HandshakeTimeout time.Duration
	HelloTimeout     time.Duration
	AuthTimeout      time.Duration
	Linger           time.Duration
	PingInterval     time.Duration
	PingTimeout      time.Duration
	OpenTimeout      time.Duration
}

// FromConfig reads the certificate, key and client CA named by c.
func FromConfig(c config.EventBus) (Settings, error) {
	cert, err := tls.LoadX509KeyPair(c.TLS.Cert, c.TLS.Key)
	if err != nil {
		return Settings{}, fmt.Errorf("event bus certificate: %w", err)
	}
	s := Settings{
		Brokers:               append([]config.BusClient(nil), c.Brokers...),
		Certificate:           cert,
		MaxSessions:           c.MaxSessions,
		MaxStreamsPerSession:  c.MaxStreamsPerSession,
		MaxSessionBufferBytes: c.MaxSessionBufferBytes,
		HeartbeatInterval:     time.Duration(c.HeartbeatInterval),
		IdleTimeout:           time.Duration(c.IdleTimeout),
	}
	if c.TLS.ClientCA != "" {
		pem, err := os.ReadFile(c.TLS.ClientCA)
		if err != nil {
			return Settings{}, fmt.Errorf("event bus client CA: %w", err)
		}
		s.ClientCAPEM = pem
	}
	return s, nil
}

// StreamBuffer is one per-direction buffer of a data stream:
// max_session_buffer_bytes / (4 × max_streams_per_session), clamped to
// 16 KiB..1 MiB.
func StreamBuffer(sessionBuffer int64, maxStreams int) int {
	if maxStreams < 1 {
		maxStreams = 1
	}
	b := sessionBuffer / (4 * int64(maxStreams))
	return int(min(max(b, MinStreamBuffer), MaxStreamBuffer))
}

// ConnectionLimit is the cap on concurrent TCP connections.
func ConnectionLimit(maxSessions int) int {
	return max(4*maxSessions, MinConnections)
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// state is one generation of settings, with what is derived from them.
type state struct {
	Settings
	tls     *tls.Config
	caGen   uint64
	byID    map[string]*config.BusClient
	byToken map[string]*config.BusClient // token_hash → entry
}

func newState(s Settings, prev *state) (*state, error) {
	if s.MaxSessions < 1 || s.MaxStreamsPerSession < 1 {
		return nil, errors.New("event bus: max_sessions and max_streams_per_session must be at least 1")
	}
	if s.MaxSessionBufferBytes < int64(s.MaxStreamsPerSession)*4*MinStreamBuffer {
		return nil, errors.New("event bus: max_session_buffer_bytes below max_streams_per_session × 64 KiB")
	}
	if s.HeartbeatInterval <= 0 || s.IdleTimeout <= s.HeartbeatInterval {
		return nil, errors.New("event bus: idle_timeout must be longer than a positive heartbeat_interval")
	}
	s.HandshakeTimeout = orDefault(s.HandshakeTimeout, HandshakeTimeout)
	s.HelloTimeout = orDefault(s.HelloTimeout, HelloTimeout)
	s.AuthTimeout = orDefault(s.AuthTimeout, AuthTimeout)
	s.Linger = orDefault(s.Linger, Linger)
	s.PingInterval = orDefault(s.PingInterval, PingInterval)
	s.PingTimeout = orDefault(s.PingTimeout, PingTimeout)
	s.OpenTimeout = orDefault(s.OpenTimeout, OpenTimeout)
	st := &state{Settings: s, byID: map[string]*config.BusClient{}, byToken: map[string]*config.BusClient{}}
	for i := range s.Brokers {
		e := &st.Brokers[i]
		if e.Role == "" {
			e.Role = config.BusRoleBroker
		}
		st.byID[e.ID] = e
		if e.TokenHash != "" {
			st.byToken[e.TokenHash] = e
		}
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		MaxVersion:   tls.VersionTLS13,
		NextProtos:   []string{"h2"},
		Certificates: []tls.Certificate{s.Certificate},
		ClientAuth:   tls.NoClientCert,
	}
	switch {
	case prev != nil && bytes.Equal(prev.ClientCAPEM, s.ClientCAPEM):
		st.caGen = prev.caGen
	case prev != nil:
		st.caGen = prev.caGen + 1
	}
	if len(s.ClientCAPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(s.ClientCAPEM) {
			return nil, errors.New("event bus: tls.client_ca holds no PEM certificate")
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	st.tls = cfg
	return st, nil
}
