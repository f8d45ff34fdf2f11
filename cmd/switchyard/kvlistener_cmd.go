package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"switchyard/router/bus/broker"
	"switchyard/router/bus/kvlistener"
	"switchyard/router/bus/wire"
	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/eventplane"
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
		RunE: runAgent(&logs, func(ctx context.Context, cmd *cobra.Command, log *slog.Logger) error {
			return runKVListener(ctx, cmd, log, f)
		}),
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
	f.bindConnection(fl)
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
	reg, dmet := agentRegistry()
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

	view := newFleetView(log, &dmet)
	sup := followDiscovery(view, clk, log, &dmet, cfg)
	defer sup.Stop()
	subs := l.Subscriptions(clk, log.With("component", "kv"), &eventplane.Dialer{Allow: allow})
	followCtx, stopFollow := context.WithCancel(context.Background())
	followDone := make(chan struct{})
	go func() { defer close(followDone); l.Follow(followCtx, view.f.Registry, subs) }()
	defer func() { stopFollow(); <-followDone }()

	stopMetrics, err := serveAgentMetrics(cmd, "kv-listener", f.metricsListen, reg, sup)
	if err != nil {
		return err
	}
	defer stopMetrics()
	log.Info("kv-listener starting", "bus_url", f.busURL, "client_id", f.clientID, "backends", f.backends,
		"discovery", cfg.Dynamo.Discovery.Source, "ring_events", f.ringEvents, "ring_bytes", f.ringBytes)
	err = agent.Run(ctx)
	log.Info("kv-listener stopped")
	return err
}
