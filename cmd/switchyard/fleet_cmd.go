package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"switchyard/fakefleet/fleet"
	"switchyard/fakefleet/kuberegistrar"
	"switchyard/fakefleet/publish"
	"switchyard/router/config"
)

func init() { register(newFleetCmd) }

func newFleetCmd() *cobra.Command {
	var (
		path                  string
		source, kubeNamespace string
		kubeconfig            string
		logs                  logFlags
	)
	cmd := &cobra.Command{
		Use:   "fleet --config FILE [--discovery etcd|kubernetes|kubernetes_pods]",
		Short: "Run a fake Dynamo fleet: workers in etcd or Kubernetes, load publishers, a direct-mode frontend",
		Long: `Run a fake Dynamo fleet.

Workers are published where the router discovers them: in etcd under
their own leases (--discovery etcd, the default), or on a Kubernetes API
server as the Dynamo operator and workers publish them: a labelled Pod
with a Running/Ready status, plus (--discovery kubernetes) the worker's
DynamoWorkerMetadata and a readiness EndpointSlice. The Pods are bound to
a node no kubelet serves; the fleet itself runs the workers on this
machine, and their load and KV-event publishers listen on loopback.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger()
			if err != nil {
				return err
			}
			ff, err := loadFleetFile(path)
			if err != nil {
				return &exitError{1, err}
			}
			ff.override(cmd, source, kubeNamespace, kubeconfig)
			if errs, _ := ff.validate(); len(errs) > 0 {
				return &exitError{1, fmt.Errorf("%s: %s (switchyard config validate lists every problem)", path, errs[0])}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rf, err := startFleet(ctx, ff, log)
			if err != nil {
				return err
			}
			defer rf.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "fake fleet: %d workers serving %s; frontend http://%s (faults under /fleet/)\n",
				len(rf.fleet.Members()), ff.Model, rf.Addr())
			if pins := rf.fleet.Checksums(); len(pins) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "the cards name a tokenizer; for KV-aware routing pin it under the router's dynamo.kv:\n  %s\n",
					pinnedArtifactsLine(pins))
			}
			<-ctx.Done()
			return nil
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "", "fleet configuration file (YAML)")
	_ = cmd.MarkFlagRequired("config")
	cmd.Flags().StringVar(&source, "discovery", "", "where to publish the workers: etcd, kubernetes or kubernetes_pods (overrides discovery.source)")
	cmd.Flags().StringVar(&kubeNamespace, "kube-namespace", "", "Kubernetes namespace of the workers' objects (overrides discovery.kubernetes.namespace; default \"default\")")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (overrides discovery.kubernetes.kubeconfig; default in-cluster, KUBECONFIG, ~/.kube/config)")
	logs.add(cmd)
	return cmd
}

// runningFleet is a fleet file brought up: the workers, registered in
// etcd, and the frontend emulation serving on its listener.
type runningFleet struct {
	// closeRegistry releases the discovery client (etcd's; nil otherwise).
	closeRegistry func()
	fleet         *fleet.Fleet
	listener      net.Listener
	http          *http.Server
	// artifactsDir holds a built-in tokenizer's files while the cards
	// name them.
	artifactsDir string
}

// startFleet registers ff's workers in its etcd and serves the frontend
// emulation on ff.Frontend. The caller owns Close.
func startFleet(ctx context.Context, ff *fleetFile, log *slog.Logger) (*runningFleet, error) {
	arts, artsDir, err := ff.fleetArtifacts()
	if err != nil {
		return nil, err
	}
	rf, err := startFleetWith(ctx, ff, arts, log)
	if err != nil {
		removeDir(artsDir)
		return nil, err
	}
	rf.artifactsDir = artsDir
	return rf, nil
}

func removeDir(dir string) {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

func startFleetWith(ctx context.Context, ff *fleetFile, arts *fleet.Artifacts, log *slog.Logger) (*runningFleet, error) {
	profile, err := ff.profile()
	if err != nil {
		return nil, fmt.Errorf("profile: %w", err)
	}
	registry, closeRegistry, err := ff.registry()
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", ff.Frontend)
	if err != nil {
		closeRegistry()
		return nil, err
	}
	fl, err := fleet.StartIn(ctx, registry, fleet.Spec{Namespace: ff.Namespace, Model: ff.Model,
		Prefill: ff.Workers.Prefill, Decode: ff.Workers.Decode, Aggregated: ff.Workers.Aggregated,
		BlockSize: ff.Card.BlockSize, TotalKVBlocks: ff.Card.TotalKVBlocks, MaxNumBatchedTokens: ff.Card.MaxNumBatchedTokens,
		MaxNumSeqs: ff.Card.MaxNumSeqs, ContextLength: ff.Card.ContextLength, DPSize: ff.Card.DPSize,
		SpeedupRatio: ff.SpeedupRatio, LeaseTTL: ff.LeaseTTL, Engine: !ff.SimpleWorkers,
		Fields:    publish.Fields{ActiveDecodeBlocks: ff.PublishSchedulerFields, ActivePrefillTokens: ff.PublishSchedulerFields},
		Artifacts: arts, Profile: profile,
	}, log.With("component", "fleet"))
	if err != nil {
		l.Close()
		closeRegistry()
		return nil, err
	}
	srv := &http.Server{Handler: fl.Handler(log), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	return &runningFleet{closeRegistry: closeRegistry, fleet: fl, listener: l, http: srv}, nil
}

// Addr is where the frontend emulation listens.
func (r *runningFleet) Addr() string { return r.listener.Addr().String() }

// Close stops serving, then the workers (revoking their leases, or
// deleting their Kubernetes objects).
func (r *runningFleet) Close() {
	r.http.Close()
	r.fleet.Close()
	r.closeRegistry()
	removeDir(r.artifactsDir)
}

// override applies the command line's discovery flags that were set.
func (ff *fleetFile) override(cmd *cobra.Command, source, namespace, kubeconfig string) {
	if cmd.Flags().Changed("discovery") {
		ff.Discovery.Source = source
	}
	if cmd.Flags().Changed("kube-namespace") {
		ff.Discovery.Kubernetes.Namespace = namespace
	}
	if cmd.Flags().Changed("kubeconfig") {
		// Relative to the working directory, as any flag path is.
		abs, err := filepath.Abs(kubeconfig)
		if err != nil {
			abs = kubeconfig
		}
		ff.Discovery.Kubernetes.Kubeconfig = abs
	}
}

// registry connects to where the fleet file publishes its workers.
func (ff *fleetFile) registry() (fleet.Registry, func(), error) {
	switch src := ff.Discovery.Source; src {
	case config.SourceKubernetes, config.SourceKubernetesPods:
		kubeconfig := ff.Discovery.Kubernetes.Kubeconfig
		if kubeconfig != "" {
			kubeconfig = ff.artifactPath(kubeconfig)
		}
		rc, err := kubeRESTConfig(kubeconfig)
		if err != nil {
			return nil, nil, fmt.Errorf("kubernetes client: %w", err)
		}
		ns := ff.Discovery.Kubernetes.Namespace
		if ns == "" {
			ns = "default"
		}
		prefix := ff.Namespace
		if prefix == "" {
			prefix = "dynamo"
		}
		r, err := kuberegistrar.New(rc, ns, prefix, kuberegistrar.Shape(src))
		if err != nil {
			return nil, nil, err
		}
		return fleet.KubernetesRegistry(r), func() {}, nil
	default:
		cli, err := clientv3.New(clientv3.Config{Endpoints: ff.Etcd.Endpoints, DialTimeout: 10 * time.Second})
		if err != nil {
			return nil, nil, err
		}
		return fleet.EtcdRegistry(cli, ff.LeaseTTL), func() { cli.Close() }, nil
	}
}

// kubeRESTConfig reads a kubeconfig file, or without one takes in-cluster
// credentials, else KUBECONFIG or ~/.kube/config, as the router does.
func kubeRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if rc, err := rest.InClusterConfig(); err == nil {
		return rc, nil
	} else if !errors.Is(err, rest.ErrNotInCluster) {
		return nil, err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}
