package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"switchyard/router/bus/broker"
	"switchyard/router/bus/kvlistener"
	"switchyard/router/bus/wire"
	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource"
	"switchyard/router/eventplane"
	"switchyard/router/metrics"
)

func init() { register(newKVListenerCmd) }

type kvListenerFlags struct {
	brokerFlags
	backends         []string
	directAllowCIDRs []string
	ringEvents       int
	ringBytes        int64
}

func newKVListenerCmd() *cobra.Command {
	var (
		f    kvListenerFlags
		logs logFlags
	)
	cmd := &cobra.Command{
		Use:   "kv-listener --bus-url https://HOST:PORT --client-id ID --backend NAME=NAMESPACE...",
		Short: "Run the in-cluster KV listener: push backends' KV-cache events to a router's event bus as SSE",
		Long: `Run the in-cluster KV listener (docs/event-bus.md, the kv_listener push role).
It follows the kv-events of the workers of each --backend NAME=NAMESPACE (their
channels read from DynamoWorkerMetadata with --discovery kubernetes, else from
etcd at --etcd-endpoints), keeps each backend's latest events in a bounded
replay ring (--ring-events, --ring-bytes), dials OUT to a router's event-bus
listener (--bus-url) with a bearer token (--token-file, else --token-env) or a
client certificate, announces the backends, and streams each one the router
subscribes to as SSE from the last event id the router applied (a reset when
those events are gone). SIGTERM drains. Metrics, /health and /ready are served
on --metrics-listen.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.loggerTo(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return runKVListener(ctx, cmd, log, f)
		},
	}
	f.bind(cmd.Flags())
	logs.add(cmd)
	return cmd
}

// bind declares the command's flags over f.
func (f *kvListenerFlags) bind(fl *pflag.FlagSet) {
	fl.StringVar(&f.busURL, "bus-url", "", "the router's event-bus listener, https://host:port (required)")
	fl.StringVar(&f.clientID, "client-id", "", "this listener's brokers[].id at the router (required)")
	fl.StringArrayVar(&f.backends, "backend", nil, "NAME=NAMESPACE: a backend announced and the Dynamo namespace of its workers (repeatable, required)")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token (re-read at every reconnect)")
	fl.StringVar(&f.tokenEnv, "token-env", DefaultBrokerTokenEnv, "variable holding the bearer token when no --token-file is given")
	fl.StringVar(&f.caFile, "ca-file", "", "PEM bundle verifying the router's certificate (default: the system roots)")
	fl.StringVar(&f.certFile, "cert-file", "", "client certificate (PEM) whose DNS SAN is the client id")
	fl.StringVar(&f.keyFile, "key-file", "", "the client certificate's key (PEM)")
	fl.StringVar(&f.serverName, "server-name", "", "name to verify the router's certificate against (default: the bus URL's host)")
	fl.StringVar(&f.source, "discovery", "", "discovery source: etcd or kubernetes (default: kubernetes when DYN_DISCOVERY_BACKEND=kubernetes, else etcd)")
	fl.StringSliceVar(&f.etcdEndpoints, "etcd-endpoints", nil, "etcd endpoints (default: ETCD_ENDPOINTS, else localhost:2379)")
	fl.StringVar(&f.kubeNamespace, "kube-namespace", "", "Kubernetes namespace of the DynamoWorkerMetadata (default: POD_NAMESPACE, else default)")
	fl.StringSliceVar(&f.directAllowCIDRs, "direct-allow-cidrs", nil, "CIDRs the workers' publishers may be dialed in (default: any)")
	fl.StringVar(&f.metricsListen, "metrics-listen", ":9467", "address of /metrics, /health and /ready (empty: none)")
	fl.IntVar(&f.maxStreams, "max-streams", broker.DefaultMaxStreams, "most data streams held at once")
	fl.IntVar(&f.ringEvents, "ring-events", kvlistener.DefaultRingEvents, "events kept per backend for resuming routers")
	fl.Int64Var(&f.ringBytes, "ring-bytes", kvlistener.DefaultRingBytes, "bytes of events kept per backend for resuming routers")
}

// parseBackends reads NAME=NAMESPACE pairs: names and namespaces as the
// event bus's wire allows them, each name once, at most wire.MaxSources
// backends. It returns the namespaces too, each once, in order.
func parseBackends(pairs []string) ([]kvlistener.Backend, []string, error) {
	if len(pairs) == 0 {
		return nil, nil, errors.New("--backend NAME=NAMESPACE is required")
	}
	if len(pairs) > wire.MaxSources {
		return nil, nil, fmt.Errorf("--backend: at most %d backends, got %d", wire.MaxSources, len(pairs))
	}
	var out []kvlistener.Backend
	var namespaces []string
	for _, p := range pairs {
		name, ns, ok := strings.Cut(p, "=")
		if !ok || name == "" || ns == "" || strings.Contains(ns, "=") {
			return nil, nil, fmt.Errorf("--backend %q: want NAME=NAMESPACE", p)
		}
		for _, n := range []struct{ what, v string }{{"name", name}, {"namespace", ns}} {
			if problem := nameProblem(n.v); problem != "" {
				return nil, nil, fmt.Errorf("--backend %q: the %s %s", p, n.what, problem)
			}
		}
		if slices.ContainsFunc(out, func(b kvlistener.Backend) bool { return b.Name == name }) {
			return nil, nil, fmt.Errorf("--backend %q: backend %q is given twice", p, name)
		}
		out = append(out, kvlistener.Backend{Name: name, Namespace: ns})
		if !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	return out, namespaces, nil
}

// nameProblem says why s cannot name a backend or a namespace on the
// event bus ("" when it can).
func nameProblem(s string) string {
	if len(s) > wire.MaxNameBytes {
		return fmt.Sprintf("is longer than %d bytes", wire.MaxNameBytes)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c == 0x7f {
			return "holds a space or control character"
		}
	}
	return ""
}

// kvListenerSettings are the checked flags, with the environment's
// defaults applied.
type kvListenerSettings struct {
	backends  []kvlistener.Backend
	discovery *config.Config
	allow     []netip.Prefix
}

// check refuses bad flags, naming the flag, before anything starts.
func (f *kvListenerFlags) check(lookup func(string) (string, bool)) (kvListenerSettings, error) {
	var s kvListenerSettings
	if f.busURL == "" || f.clientID == "" {
		return s, errors.New("--bus-url and --client-id are required")
	}
	if f.maxStreams <= 0 || f.maxStreams > 65536 {
		return s, fmt.Errorf("--max-streams must be 1-65536, got %d", f.maxStreams)
	}
	if f.ringEvents < 1 || f.ringEvents > kvlistener.MaxRingEvents {
		return s, fmt.Errorf("--ring-events must be 1-%d, got %d", kvlistener.MaxRingEvents, f.ringEvents)
	}
	if f.ringBytes < kvlistener.MinRingBytes {
		return s, fmt.Errorf("--ring-bytes must be at least %d (one event of the largest size), got %d", kvlistener.MinRingBytes, f.ringBytes)
	}
	backends, namespaces, err := parseBackends(f.backends)
	if err != nil {
		return s, err
	}
	f.namespaces = namespaces
	cfg, err := f.discoveryConfig(lookup)
	if err != nil {
		return s, err
	}
	allow, err := eventplane.ParseAllow(f.directAllowCIDRs)
	if err != nil {
		return s, fmt.Errorf("--direct-allow-cidrs: %w", err)
	}
	return kvListenerSettings{backends: backends, discovery: cfg, allow: allow}, nil
}

func runKVListener(ctx context.Context, cmd *cobra.Command, log *slog.Logger, f kvListenerFlags) error {
	set, err := f.check(os.LookupEnv)
	if err != nil {
		return err
	}
	backends, cfg, allow := set.backends, set.discovery, set.allow
	tc, err := f.tlsConfig()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	dmet := metrics.NewDiscovery()
	reg.MustRegister(dmet.Collectors()...)
	amet := broker.NewMetricsFor("kv_listener")
	reg.MustRegister(amet.Collectors()...)
	lmet := kvlistener.NewMetrics()
	reg.MustRegister(lmet.Collectors()...)

	clk := clock.Real{}
	l, err := kvlistener.New(kvlistener.Config{Backends: backends, RingEvents: f.ringEvents, RingBytes: f.ringBytes,
		FirstID: uint64(time.Now().UnixMicro()), Log: log.With("component", "kv-listener"), Metrics: lmet})
	if err != nil {
		return err
	}
	agent, err := broker.New(broker.Config{
		BusURL: f.busURL, ClientID: f.clientID, Token: f.token(), TLS: tc, MaxStreams: f.maxStreams,
		Sources: l.Backends(), Serve: l.Serve, Log: log.With("component", "agent"), Metrics: amet,
	})
	if err != nil {
		return err
	}

	view := fleetView{discovery.NewFollower(discovery.NewReducer(log.With("component", "discovery"), dmet.CountDiscovery), discovery.NewRegistry())}
	sup := discoverysource.New(view, clk, log, &dmet, discoverysource.Sources(clk, log))
	sup.Apply(cfg)
	defer sup.Stop()
	subs := l.Subscriptions(clk, log.With("component", "kv"), &eventplane.Dialer{Allow: allow})
	followCtx, stopFollow := context.WithCancel(context.Background())
	followDone := make(chan struct{})
	go func() { defer close(followDone); l.Follow(followCtx, view.f.Registry, subs) }()
	defer func() { stopFollow(); <-followDone }()

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
		fmt.Fprintf(cmd.OutOrStdout(), "kv-listener: metrics on http://%s\n", ln.Addr())
	}
	log.Info("kv-listener starting", "bus_url", f.busURL, "client_id", f.clientID, "backends", f.backends,
		"discovery", cfg.Dynamo.Discovery.Source, "ring_events", f.ringEvents, "ring_bytes", f.ringBytes)
	err = agent.Run(ctx)
	log.Info("kv-listener stopped")
	return err
}
