package etcdsource

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Config is what one watcher needs. Validation with field paths belongs to
// router/config; New only fills defaults and Run refuses an unusable one.
type Config struct {
	// Endpoints are http(s)://host:port URLs without credentials.
	Endpoints []string
	// Namespaces are the Dynamo namespaces (DYN_NAMESPACE) to watch, >= 1.
	Namespaces []string
	// TLS, when nil, means plaintext for http:// endpoints and system roots
	// for https:// ones.
	TLS *TLS
	// Username and Password, when both set, make clientv3 authenticate on
	// connect; the account needs only read permission on v1/.
	Username, Password string
	// BackoffInitial and BackoffMax bound the wait between passes
	// (0 = DefaultBackoffInitial / DefaultBackoffMax).
	BackoffInitial, BackoffMax time.Duration
}

// TLS names the client's PEM files.
type TLS struct {
	// CAFile verifies the server; empty = system roots.
	CAFile string
	// CertFile and KeyFile, set together, present a client certificate.
	CertFile, KeyFile string
	// ServerName overrides the name checked in the server's certificate.
	ServerName string
}

// check reports a Config no pass could use.
func (c Config) check() error {
	if len(c.Endpoints) == 0 {
		return errors.New("etcd discovery: no endpoints")
	}
	if len(c.Namespaces) == 0 {
		return errors.New("etcd discovery: no namespaces")
	}
	seen := make(map[string]bool, len(c.Namespaces))
	for _, ns := range c.Namespaces {
		// A '/' would let one namespace's prefix cover another's keys; a
		// repeat would deliver its records twice.
		if ns == "" || strings.Contains(ns, "/") || seen[ns] {
			return fmt.Errorf("etcd discovery: bad or repeated namespace %q", ns)
		}
		seen[ns] = true
	}
	return nil
}

// tlsConfig builds the client TLS config, reading the files on every pass
// so rotated certificates are picked up on reconnect.
func (c Config) tlsConfig() (*tls.Config, error) {
	if c.TLS == nil {
		for _, ep := range c.Endpoints {
			if strings.HasPrefix(ep, "https://") {
				return &tls.Config{MinVersion: tls.VersionTLS12}, nil
			}
		}
		return nil, nil
	}
	out := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLS.ServerName}
	if c.TLS.CAFile != "" {
		pemCA, err := os.ReadFile(c.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemCA) {
			return nil, fmt.Errorf("no PEM certificate in CA file %s", c.TLS.CAFile)
		}
		out.RootCAs = pool
	}
	if c.TLS.CertFile != "" || c.TLS.KeyFile != "" {
		pair, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		out.Certificates = []tls.Certificate{pair}
	}
	return out, nil
}
