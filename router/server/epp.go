package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc"

	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/core"
	"switchyard/router/epp"
	"switchyard/router/gateway"
)

// eppHost is the endpoint picker running beside the gateway: the ext_proc
// gRPC server on epp.listen, routing on the server's core.
type eppHost struct {
	srv      *epp.Server
	grpc     *grpc.Server
	stop     func()
	listener net.Listener
	done     chan struct{}
	// health serves the plaintext health-only listener (nil without one).
	health     *grpc.Server
	healthDone chan struct{}
}

// startEPP starts the endpoint picker when the configuration enables it.
func (s *Server) startEPP(cfg *config.Config) error {
	if !cfg.EPP.Enabled {
		return nil
	}
	cert, err := eppCertificate(cfg.EPP)
	if err != nil {
		return err
	}
	o := epp.Options{Picker: s.core, Workers: s.core, Clock: clock.Real{}, Log: s.log.With("component", "epp"),
		Metrics: s.metrics.EPP}
	if s.prompts != nil && s.prompts.service != nil {
		o.Prompter = s.prompts.service
	}
	if s.recording {
		o.OnOutcome = s.core.Outcome
	}
	h := &eppHost{srv: epp.New(epp.SettingsFrom(cfg), o), done: make(chan struct{})}
	g, hs, stop := epp.NewGRPC(h.srv, epp.GRPCOptions{TLS: cert, Ready: s.routable})
	h.grpc, h.stop = g, stop
	ln, err := net.Listen("tcp", cfg.EPP.Listen)
	if err != nil {
		h.stop()
		return fmt.Errorf("listen on epp.listen %s: %w", cfg.EPP.Listen, err)
	}
	h.listener = ln
	go func() {
		defer close(h.done)
		if err := h.grpc.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("endpoint picker stopped", "error", err)
		}
	}()
	if cfg.EPP.HealthListen != "" {
		hl, err := net.Listen("tcp", cfg.EPP.HealthListen)
		if err != nil {
			h.grpc.Stop()
			<-h.done
			h.stop()
			return fmt.Errorf("listen on epp.health_listen %s: %w", cfg.EPP.HealthListen, err)
		}
		h.health, h.healthDone = epp.HealthOnly(hs), make(chan struct{})
		go func() {
			defer close(h.healthDone)
			_ = h.health.Serve(hl)
		}()
	}
	s.epp = h
	s.log.Info("endpoint picker serving", "addr", ln.Addr().String(), "tls", cert != nil)
	return nil
}

// routable is the endpoint picker's readiness: discovery has synced.
func (s *Server) routable() bool { return s.discovery != nil && s.discovery.Connected() }

func eppCertificate(e config.EPP) (*tls.Certificate, error) {
	switch {
	case e.Plaintext:
		return nil, nil
	case e.CertFile != "":
		c, err := tls.LoadX509KeyPair(e.CertFile, e.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("epp.cert_file: %w", err)
		}
		return &c, nil
	}
	return epp.SelfSignedCertificate()
}

// EPPAddr is the endpoint picker's listen address, "" when it is off.
func (s *Server) EPPAddr() string {
	if s.epp == nil {
		return ""
	}
	return s.epp.listener.Addr().String()
}

// closeEPP stops taking streams and lets the open ones finish.
func (h *eppHost) close() {
	h.grpc.GracefulStop()
	<-h.done
	if h.health != nil {
		h.health.Stop()
		<-h.healthDone
	}
	h.stop()
}

// Both hosts report first tokens to the core: a core that stopped
// hearing them would hold every tracked prompt until its request ended.
// Both count streamed output for the core's predicted output blocks,
// which would otherwise hold until each request ended.
var (
	_ epp.FirstTokener      = (*core.Shared)(nil)
	_ gateway.FirstTokener  = (*core.Shared)(nil)
	_ epp.OutputTracker     = (*core.Shared)(nil)
	_ gateway.OutputTracker = (*core.Shared)(nil)
)
