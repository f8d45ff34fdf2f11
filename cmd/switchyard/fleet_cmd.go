package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/fleet"
	"switchyard/fakefleet/publish"
)

func init() { register(newFleetCmd) }

func newFleetCmd() *cobra.Command {
	var (
		path string
		logs logFlags
	)
	cmd := &cobra.Command{
		Use:   "fleet --config FILE",
		Short: "Run a fake Dynamo fleet: workers in etcd, load publishers, a direct-mode frontend",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger()
			if err != nil {
				return err
			}
			ff, err := loadFleetFile(path)
			if err != nil {
				return &exitError{1, err}
			}
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
	logs.add(cmd)
	return cmd
}

// runningFleet is a fleet file brought up: the workers, registered in
// etcd, and the frontend emulation serving on its listener.
type runningFleet struct {
	cli      *clientv3.Client
	fleet    *fleet.Fleet
	listener net.Listener
	http     *http.Server
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
	cli, err := clientv3.New(clientv3.Config{Endpoints: ff.Etcd.Endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", ff.Frontend)
	if err != nil {
		cli.Close()
		return nil, err
	}
	fl, err := fleet.Start(ctx, cli, fleet.Spec{Namespace: ff.Namespace, Model: ff.Model,
		Prefill: ff.Workers.Prefill, Decode: ff.Workers.Decode, Aggregated: ff.Workers.Aggregated,
		BlockSize: ff.Card.BlockSize, TotalKVBlocks: ff.Card.TotalKVBlocks, MaxNumBatchedTokens: ff.Card.MaxNumBatchedTokens,
		MaxNumSeqs: ff.Card.MaxNumSeqs, ContextLength: ff.Card.ContextLength, DPSize: ff.Card.DPSize,
		SpeedupRatio: ff.SpeedupRatio, LeaseTTL: ff.LeaseTTL, Engine: !ff.SimpleWorkers,
		Fields:    publish.Fields{ActiveDecodeBlocks: ff.PublishSchedulerFields, ActivePrefillTokens: ff.PublishSchedulerFields},
		Artifacts: arts, Profile: profile,
	}, log.With("component", "fleet"))
	if err != nil {
		l.Close()
		cli.Close()
		return nil, err
	}
	srv := &http.Server{Handler: fl.Handler(log), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	return &runningFleet{cli: cli, fleet: fl, listener: l, http: srv}, nil
}

// Addr is where the frontend emulation listens.
func (r *runningFleet) Addr() string { return r.listener.Addr().String() }

// Close stops serving, then the workers (revoking their leases).
func (r *runningFleet) Close() {
	r.http.Close()
	r.fleet.Close()
	r.cli.Close()
	removeDir(r.artifactsDir)
}
