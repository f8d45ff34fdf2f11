// Package etcdtest runs a real, in-process etcd for tests.
//
// Discovery is tested against the real server because the behaviour that
// matters (revisions, compaction, lease expiry, auth, dropped connections)
// lives in etcd, not in the router. Everything here is test-only: Client
// hands out a *writing* client, which production code must never hold.
package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"switchyard/router/discoverysource/etcdsource/embedded"
)

// opTimeout bounds each helper call against the server.
const opTimeout = 10 * time.Second

// Server is one embedded member owned by a test.
type Server struct {
	opts embedded.Options
	e    *embedded.Embedded
	tls  *TLSFiles
	// rootPassword is set once EnableAuth ran; Client then logs in as root.
	rootPassword string
}

// Start runs a plaintext member on free loopback ports with its data in
// t.TempDir(); the member stops when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, embedded.Options{}, nil)
}

func start(t testing.TB, o embedded.Options, files *TLSFiles) *Server {
	t.Helper()
	o.Dir = t.TempDir()
	o.ClientAddr = "127.0.0.1:0"
	// Tests do not survive a crash, so fsync only costs time; a low bcrypt
	// cost keeps auth setup from dominating the run under -race.
	o.NoFsync = true
	o.BcryptCost = 4
	o.ReadyTimeout = 20 * time.Second
	e, err := embedded.Start(o)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	s := &Server{opts: e.Options(), e: e, tls: files}
	t.Cleanup(s.Stop)
	return s
}

// Endpoint is the client URL (http:// or https://).
func (s *Server) Endpoint() string { return s.e.Endpoint() }

// Stop shuts the member down; the data dir and ports stay reserved for
// Restart. Safe to call when already stopped.
func (s *Server) Stop() {
	if s.e != nil {
		s.e.Close()
	}
}

// Restart starts the member again on the same data dir and ports, after
// Stop. It fails the test if the member does not come back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	e, err := embedded.Start(s.opts)
	if err != nil {
		t.Fatalf("etcdtest: restart: %v", err)
	}
	s.e = e
}

// Client returns a test-only client that may write. After EnableAuth it is
// logged in as root. It is closed when the test ends.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	if s.rootPassword != "" {
		return s.ClientAs(t, "root", s.rootPassword)
	}
	return s.ClientAs(t, "", "")
}

// ClientAs returns a test-only client logged in as user (empty = no auth).
func (s *Server) ClientAs(t testing.TB, user, password string) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{
		Endpoints:   []string{s.Endpoint()},
		DialTimeout: opTimeout,
		Username:    user,
		Password:    password,
		Logger:      zap.NewNop(),
	}
	if s.tls != nil {
		tc, err := s.tls.clientConfig()
		if err != nil {
			t.Fatalf("etcdtest: client tls: %v", err)
		}
		cfg.TLS = tc
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// EnableAuth creates the root user with rootPassword and turns auth on.
// Later Client calls log in as root.
func (s *Server) EnableAuth(t testing.TB, rootPassword string) {
	t.Helper()
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := c.UserAdd(ctx, "root", rootPassword); err != nil {
		t.Fatalf("etcdtest: add root: %v", err)
	}
	// etcd refuses AuthEnable unless root holds the built-in root role.
	if _, err := c.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatalf("etcdtest: grant root: %v", err)
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		t.Fatalf("etcdtest: auth enable: %v", err)
	}
	s.rootPassword = rootPassword
}

// AddReader creates user with a role that may only read keys under prefix
// (the shape of a discovery router's etcd account). Call after EnableAuth.
func (s *Server) AddReader(t testing.TB, user, password, prefix string) {
	t.Helper()
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	role := user + "-read"
	if _, err := c.RoleAdd(ctx, role); err != nil {
		t.Fatalf("etcdtest: add role: %v", err)
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	if _, err := c.RoleGrantPermission(ctx, role, prefix, end, clientv3.PermissionType(clientv3.PermRead)); err != nil {
		t.Fatalf("etcdtest: grant read: %v", err)
	}
	if _, err := c.UserAdd(ctx, user, password); err != nil {
		t.Fatalf("etcdtest: add user: %v", err)
	}
	if _, err := c.UserGrantRole(ctx, user, role); err != nil {
		t.Fatalf("etcdtest: grant role: %v", err)
	}
}
