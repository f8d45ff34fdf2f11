package epp

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// Health service names: the process is alive, it can route (discovery
// has synced), and the ext_proc service itself.
const (
	HealthLiveness  = "liveness"
	HealthReadiness = "readiness"
	HealthService   = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// maxMessageBytes bounds one ext_proc message.
const maxMessageBytes = 64 << 20

// GRPCOptions configure the gRPC server around the ext_proc service.
type GRPCOptions struct {
	// TLS serves with this certificate; nil serves plaintext.
	TLS *tls.Certificate
	// Ready reports whether requests can be routed (discovery synced).
	Ready func() bool
	// ReadyEvery is how often readiness is re-read (default 1 s).
	ReadyEvery time.Duration
}

// NewGRPC builds the gRPC server: the ext_proc service, health (checked
// by Kubernetes probes and by gateways) and reflection (for grpcurl). The
// returned health server also serves a plaintext health-only listener when
// one is wanted (HealthOnly); stop ends the readiness updates: call it
// after GracefulStop.
func NewGRPC(s *Server, o GRPCOptions) (g *grpc.Server, hs *health.Server, stop func()) {
	opts := []grpc.ServerOption{
		// A gateway keeps one connection and many streams; pings keep it
		// honest across idle periods.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// Above any gateway.max_body_bytes in use, so that a BUFFERED
		// body past that cap gets the picker's 413, not a transport error.
		grpc.MaxRecvMsgSize(maxMessageBytes),
	}
	if o.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*o.TLS}, MinVersion: tls.VersionTLS12})))
	}
	g = grpc.NewServer(opts...)
	extprocv3.RegisterExternalProcessorServer(g, s)
	hs = health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
	hs.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	ctx, cancel := context.WithCancel(context.Background())
	every := o.ReadyEvery
	if every <= 0 {
		every = time.Second
	}
	setReady := func() {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if o.Ready == nil || o.Ready() {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus(HealthReadiness, st)
		hs.SetServingStatus(HealthService, st)
		hs.SetServingStatus("", st)
	}
	setReady()
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				setReady()
			}
		}
	}()
	return g, hs, func() {
		cancel()
		<-done
		hs.Shutdown()
	}
}

// HealthOnly is a plaintext gRPC server with nothing but hs, for probes
// that cannot speak TLS.
func HealthOnly(hs *health.Server) *grpc.Server {
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	return g
}

// SelfSignedCertificate makes the serving certificate used when none is
// configured: gateways connect to endpoint pickers over TLS without
// verifying it by default (seed 003: insecureSkipVerify).
func SelfSignedCertificate(hosts ...string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "switchyard-epp"},
		DNSNames:     append([]string{"localhost"}, hosts...),
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
