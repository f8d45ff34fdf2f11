package main

import (
	"context"
	"errors"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"switchyard/router/bus/broker"
	"switchyard/router/clock"
	"switchyard/router/config"
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
		RunE: runAgent(&logs, func(ctx context.Context, cmd *cobra.Command, log *slog.Logger) error {
			return runBroker(ctx, cmd, log, f)
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.busURL, "bus-url", "", "the router's event-bus listener, https://host:port (required)")
	fl.StringVar(&f.clientID, "client-id", "", "this broker's brokers[].id at the router (required)")
	fl.StringSliceVar(&f.namespaces, "namespace", []string{config.DefaultNamespace}, "Dynamo namespace served (repeatable)")
	f.bindConnection(fl)
	fl.StringVar(&f.metricsListen, "metrics-listen", ":9466", "address of /metrics, /health and /ready (empty: none)")
	fl.IntVar(&f.maxStreams, "max-streams", broker.DefaultMaxStreams, "most data streams held at once")
	logs.add(cmd)
	return cmd
}

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
	reg, dmet := agentRegistry()
	bmet := broker.NewMetrics()
	reg.MustRegister(bmet.Collectors()...)

	view := newFleetView(log, &dmet)
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
	sup := followDiscovery(view, clk, log, &dmet, cfg)
	defer sup.Stop()

	stopMetrics, err := serveAgentMetrics(cmd, "broker", f.metricsListen, reg, sup)
	if err != nil {
		return err
	}
	defer stopMetrics()
	log.Info("broker starting", "bus_url", f.busURL, "client_id", f.clientID, "namespaces", f.namespaces,
		"discovery", cfg.Dynamo.Discovery.Source)
	err = agent.Run(ctx)
	log.Info("broker stopped")
	return err
}
