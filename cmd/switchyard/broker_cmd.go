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

	"switchyard/router/bus/broker"
	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource"
	"switchyard/router/events"
	"switchyard/router/metrics"
)

func init() { register(newBrokerCmd) }

// DefaultBrokerTokenEnv is the variable the broker's bearer token is read
// from when no --token-file is given.
const DefaultBrokerTokenEnv = "SWITCHYARD_BUS_TOKEN"

// DefaultBrokerEtcd is the etcd the broker reads when neither
// --etcd-endpoints nor ETCD_ENDPOINTS names one (Dynamo's own default).
const DefaultBrokerEtcd = "localhost:2379"

type brokerFlags struct {
	busURL, clientID          string
	namespaces                []string
	tokenFile, tokenEnv       string
	caFile, certFile, keyFile string
	serverName                string
	source                    string
	etcdEndpoints             []string
	kubeNamespace             string
	metricsListen             string
	maxStreams                int
}

func newBrokerCmd() *cobra.Command {
	var (
		f    brokerFlags
		logs logFlags
	)
	cmd := &cobra.Command{
		Use:   "broker --bus-url https://HOST:PORT --client-id ID [--namespace NS]...",
		Short: "Run the in-cluster event broker: relay ZMQ publishers to a router's event-bus listener",
		Long: `Run the in-cluster event broker (docs/event-bus.md). It dials OUT to a
router's event-bus listener (--bus-url), authenticates with a bearer token (the
file --token-file, else the variable --token-env) or a client certificate,
announces the Dynamo namespaces it serves, and for each subscribe command
connects to the ZMQ publisher only if its own discovery advertises it in that
namespace (DynamoWorkerMetadata with --discovery kubernetes, else etcd at
--etcd-endpoints), relaying the raw bytes both ways. SIGTERM drains: draining is
sent, streams close, the session ends cleanly. Metrics, /health and /ready are
served on --metrics-listen.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.loggerTo(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return runBroker(ctx, cmd, log, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.busURL, "bus-url", "", "the router's event-bus listener, https://host:port (required)")
	fl.StringVar(&f.clientID, "client-id", "", "this broker's brokers[].id at the router (required)")
	fl.StringSliceVar(&f.namespaces, "namespace", []string{config.DefaultNamespace}, "Dynamo namespace served (repeatable)")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token (re-read at every reconnect)")
	fl.StringVar(&f.tokenEnv, "token-env", DefaultBrokerTokenEnv, "variable holding the bearer token when no --token-file is given")
	fl.StringVar(&f.caFile, "ca-file", "", "PEM bundle verifying the router's certificate (default: the system roots)")
	fl.StringVar(&f.certFile, "cert-file", "", "client certificate (PEM) whose DNS SAN is the client id")
	fl.StringVar(&f.keyFile, "key-file", "", "the client certificate's key (PEM)")
	fl.StringVar(&f.serverName, "server-name", "", "name to verify the router's certificate against (default: the bus URL's host)")
	fl.StringVar(&f.source, "discovery", "", "discovery source: etcd or kubernetes (default: kubernetes when DYN_DISCOVERY_BACKEND=kubernetes, else etcd)")
	fl.StringSliceVar(&f.etcdEndpoints, "etcd-endpoints", nil, "etcd endpoints (default: ETCD_ENDPOINTS, else localhost:2379)")
	fl.StringVar(&f.kubeNamespace, "kube-namespace", "", "Kubernetes namespace of the DynamoWorkerMetadata (default: POD_NAMESPACE, else default)")
	fl.StringVar(&f.metricsListen, "metrics-listen", ":9466", "address of /metrics, /health and /ready (empty: none)")
	fl.IntVar(&f.maxStreams, "max-streams", broker.DefaultMaxStreams, "most data streams held at once")
	logs.add(cmd)
	return cmd
}

// discoveryConfig is the broker's discovery: the router's own sources, on
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

// fleetView is the broker's discovery target: a reducer and a registry.
type fleetView struct{ f *discovery.Follower }

func (v fleetView) Discovery(batch []events.Event) { v.f.Apply(batch) }
func (v fleetView) Snapshot() *discovery.Snapshot  { return v.f.Registry.Snapshot() }

func runBroker(ctx context.Context, cmd *cobra.Command, log *slog.Logger, f brokerFlags) error {
	if f.busURL == "" || f.clientID == "" {
		return errors.New("--bus-url and --client-id are required")
	}
	if f.maxStreams <= 0 || f.maxStreams > 65536 {
		return errors.New("--max-streams must be 1-65536")
	}
	cfg, err := f.discoveryConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	tc, err := f.tlsConfig()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	dmet := metrics.NewDiscovery()
	reg.MustRegister(dmet.Collectors()...)
	bmet := broker.NewMetrics()
	reg.MustRegister(bmet.Collectors()...)

	view := fleetView{discovery.NewFollower(discovery.NewReducer(log.With("component", "discovery"), dmet.CountDiscovery), discovery.NewRegistry())}
	dir := broker.SnapshotDirectory(view.Snapshot)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_broker_advertised_publishers",
		Help: "ZMQ channels (kv_metrics and kv-events) the broker's discovery advertises in its namespaces.",
	}, func() float64 { return float64(dir.Count()) }))

	agent, err := broker.New(broker.Config{
		BusURL: f.busURL, ClientID: f.clientID, Namespaces: f.namespaces, Token: f.token(), TLS: tc,
		Directory: dir, MaxStreams: f.maxStreams, Log: log.With("component", "broker"), Metrics: bmet,
	})
	if err != nil {
		return err
	}

	clk := clock.Real{}
	sup := discoverysource.New(view, clk, log, &dmet, discoverysource.Sources(clk, log))
	sup.Apply(cfg)
	defer sup.Stop()

	if f.metricsListen != "" {
		ln, err := net.Listen("tcp", f.metricsListen)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
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
		defer hs.Close()
		fmt.Fprintf(cmd.OutOrStdout(), "broker: metrics on http://%s\n", ln.Addr())
	}
	log.Info("broker starting", "bus_url", f.busURL, "client_id", f.clientID, "namespaces", f.namespaces,
		"discovery", cfg.Dynamo.Discovery.Source)
	err = agent.Run(ctx)
	log.Info("broker stopped")
	return err
}
