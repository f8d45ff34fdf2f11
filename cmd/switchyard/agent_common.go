package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource"
	"switchyard/router/events"
	"switchyard/router/metrics"
)

// The broker and the kv-listener are both agents: they dial out to a
// router's event-bus listener, follow Dynamo discovery and serve metrics.
// What they share lives here.

// runAgent is the RunE of an agent command: the logger from logs, and a
// context ended by SIGTERM or an interrupt.
func runAgent(logs *logFlags, run func(context.Context, *cobra.Command, *slog.Logger) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		log, err := logs.loggerTo(cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		return run(ctx, cmd, log)
	}
}

// bindConnection declares the flags of the agent's connection to the
// router (credentials and TLS) and of its discovery over f.
func (f *brokerFlags) bindConnection(fl *pflag.FlagSet) {
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token (re-read at every reconnect)")
	fl.StringVar(&f.tokenEnv, "token-env", DefaultBrokerTokenEnv, "variable holding the bearer token when no --token-file is given")
	fl.StringVar(&f.caFile, "ca-file", "", "PEM bundle verifying the router's certificate (default: the system roots)")
	fl.StringVar(&f.certFile, "cert-file", "", "client certificate (PEM) whose DNS SAN is the client id")
	fl.StringVar(&f.keyFile, "key-file", "", "the client certificate's key (PEM)")
	fl.StringVar(&f.serverName, "server-name", "", "name to verify the router's certificate against (default: the bus URL's host)")
	fl.StringVar(&f.source, "discovery", "", "discovery source: etcd or kubernetes (default: kubernetes when DYN_DISCOVERY_BACKEND=kubernetes, else etcd)")
	fl.StringSliceVar(&f.etcdEndpoints, "etcd-endpoints", nil, "etcd endpoints (default: ETCD_ENDPOINTS, else localhost:2379)")
	fl.StringVar(&f.kubeNamespace, "kube-namespace", "", "Kubernetes namespace of the DynamoWorkerMetadata (default: POD_NAMESPACE, else default)")
}

// discoveryConfig is the agent's discovery: the router's own sources, on
// the namespaces it serves.
func (f brokerFlags) discoveryConfig(lookup func(string) (string, bool)) (*config.Config, error) {
	env := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	c := config.Default()
	c.Dynamo.Enabled = true
	d := &c.Dynamo.Discovery
	src := f.source
	if src == "" {
		src = config.SourceEtcd
		if env("DYN_DISCOVERY_BACKEND") == "kubernetes" {
			src = config.SourceKubernetes
		}
	}
	switch src {
	case config.SourceEtcd:
		d.Source = config.SourceEtcd
		eps := f.etcdEndpoints
		if len(eps) == 0 {
			for _, e := range strings.Split(env("ETCD_ENDPOINTS"), ",") {
				if e = strings.TrimSpace(e); e != "" {
					eps = append(eps, e)
				}
			}
		}
		if len(eps) == 0 {
			eps = []string{DefaultBrokerEtcd}
		}
		d.Etcd.Endpoints = eps
		if len(f.namespaces) == 1 {
			d.Etcd.Namespace = f.namespaces[0]
		} else {
			d.Etcd.Namespaces = f.namespaces
		}
	case config.SourceKubernetes:
		d.Source = config.SourceKubernetes
		d.Kubernetes.Namespace = f.kubeNamespace
		if d.Kubernetes.Namespace == "" {
			d.Kubernetes.Namespace = env("POD_NAMESPACE")
		}
		if d.Kubernetes.Namespace == "" {
			d.Kubernetes.Namespace = "default"
		}
		d.Kubernetes.DynamoNamespaces = f.namespaces
	default:
		return nil, fmt.Errorf("--discovery must be etcd or kubernetes, not %q", src)
	}
	return c, nil
}

// tlsConfig is the agent's TLS to the router: TLS 1.3, the --ca-file roots
// (else the system's) and the client certificate when one is given.
func (f brokerFlags) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: f.serverName}
	if f.caFile != "" {
		pem, err := os.ReadFile(f.caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("--ca-file holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return nil, errors.New("--cert-file and --key-file go together")
	}
	if f.certFile != "" {
		cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// token reads the bearer token: the file, re-read at every call, else the
// variable.
func (f brokerFlags) token() func() (string, error) {
	if f.tokenFile != "" {
		path := f.tokenFile
		return func() (string, error) {
			b, err := os.ReadFile(path)
			return strings.TrimSpace(string(b)), err
		}
	}
	name := f.tokenEnv
	return func() (string, error) { return os.Getenv(name), nil }
}

// fleetView is an agent's discovery target: a reducer and a registry.
type fleetView struct{ f *discovery.Follower }

func (v fleetView) Discovery(batch []events.Event) { v.f.Apply(batch) }
func (v fleetView) Snapshot() *discovery.Snapshot  { return v.f.Registry.Snapshot() }

// agentRegistry is an agent's metrics registry with the Go and process
// collectors and the discovery metrics registered.
func agentRegistry() (*prometheus.Registry, metrics.Discovery) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	dmet := metrics.NewDiscovery()
	reg.MustRegister(dmet.Collectors()...)
	return reg, dmet
}

// newFleetView is an empty view whose reducer counts into dmet.
func newFleetView(log *slog.Logger, dmet *metrics.Discovery) fleetView {
	return fleetView{discovery.NewFollower(discovery.NewReducer(log.With("component", "discovery"), dmet.CountDiscovery), discovery.NewRegistry())}
}

// followDiscovery starts the discovery sources of cfg feeding view; the
// caller stops the supervisor.
func followDiscovery(view fleetView, clk clock.Clock, log *slog.Logger, dmet *metrics.Discovery, cfg *config.Config) *discoverysource.Supervisor {
	sup := discoverysource.New(view, clk, log, dmet, discoverysource.Sources(clk, log))
	sup.Apply(cfg)
	return sup
}

// serveAgentMetrics serves /metrics from reg, /health, and /ready (ready
// while discovery is connected) on addr, and announces it on the
// command's output as name's; the returned func stops the server. An
// empty addr serves nothing.
func serveAgentMetrics(cmd *cobra.Command, name, addr string, reg *prometheus.Registry, sup *discoverysource.Supervisor) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if !sup.Connected() {
			http.Error(w, "discovery not connected", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	fmt.Fprintf(cmd.OutOrStdout(), "%s: metrics on http://%s\n", name, ln.Addr())
	return func() { hs.Close() }, nil
}
