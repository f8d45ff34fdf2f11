package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"gopkg.in/yaml.v3"

	"switchyard/fakefleet/fleet"
	"switchyard/fakefleet/publish"
)

func init() { register(newFleetCmd) }

// fleetFile is the fleet command's configuration.
type fleetFile struct {
	Etcd struct {
		Endpoints []string `yaml:"endpoints"`
	} `yaml:"etcd"`
	// Frontend is where the direct-mode frontend emulation (and the fault
	// API under /fleet/) listens.
	Frontend  string `yaml:"frontend"`
	Namespace string `yaml:"namespace"`
	Model     string `yaml:"model"`
	Workers   struct {
		Prefill    int `yaml:"prefill"`
		Decode     int `yaml:"decode"`
		Aggregated int `yaml:"aggregated"`
	} `yaml:"workers"`
	Card struct {
		BlockSize           int `yaml:"block_size"`
		TotalKVBlocks       int `yaml:"total_kv_blocks"`
		MaxNumBatchedTokens int `yaml:"max_num_batched_tokens"`
		MaxNumSeqs          int `yaml:"max_num_seqs"`
		ContextLength       int `yaml:"context_length"`
		DPSize              int `yaml:"data_parallel_size"`
	} `yaml:"card"`
	SpeedupRatio float64 `yaml:"speedup_ratio"`
	LeaseTTL     int64   `yaml:"lease_ttl_seconds"`
	// PublishSchedulerFields adds active_decode_blocks and
	// active_prefill_tokens to the published ActiveLoad (dynamo.vllm 1.4.2
	// sends only kv_used_blocks).
	PublishSchedulerFields bool `yaml:"publish_scheduler_fields"`
	// SimpleWorkers runs fakefleet/worker instead of the engine model (no
	// KV events, no prefix cache).
	SimpleWorkers bool `yaml:"simple_workers"`
}

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
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var ff fleetFile
			dec := yaml.NewDecoder(bytes.NewReader(raw))
			dec.KnownFields(true)
			if err := dec.Decode(&ff); err != nil {
				return &exitError{1, fmt.Errorf("%s: %w", path, err)}
			}
			if len(ff.Etcd.Endpoints) == 0 || ff.Model == "" || ff.Frontend == "" {
				return &exitError{1, fmt.Errorf("%s: etcd.endpoints, model and frontend are required", path)}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cli, err := clientv3.New(clientv3.Config{Endpoints: ff.Etcd.Endpoints, DialTimeout: 10 * time.Second})
			if err != nil {
				return err
			}
			defer cli.Close()
			l, err := net.Listen("tcp", ff.Frontend)
			if err != nil {
				return err
			}
			fl, err := fleet.Start(ctx, cli, fleet.Spec{Namespace: ff.Namespace, Model: ff.Model,
				Prefill: ff.Workers.Prefill, Decode: ff.Workers.Decode, Aggregated: ff.Workers.Aggregated,
				BlockSize: ff.Card.BlockSize, TotalKVBlocks: ff.Card.TotalKVBlocks, MaxNumBatchedTokens: ff.Card.MaxNumBatchedTokens,
				MaxNumSeqs: ff.Card.MaxNumSeqs, ContextLength: ff.Card.ContextLength, DPSize: ff.Card.DPSize,
				SpeedupRatio: ff.SpeedupRatio, LeaseTTL: ff.LeaseTTL, Engine: !ff.SimpleWorkers,
				Fields: publish.Fields{ActiveDecodeBlocks: ff.PublishSchedulerFields, ActivePrefillTokens: ff.PublishSchedulerFields},
			}, log.With("component", "fleet"))
			if err != nil {
				l.Close()
				return err
			}
			defer fl.Close()
			srv := &http.Server{Handler: fl.Handler(log), ReadHeaderTimeout: 10 * time.Second}
			go srv.Serve(l)
			defer srv.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "fake fleet: %d workers serving %s; frontend http://%s (faults under /fleet/)\n",
				len(fl.Members()), ff.Model, l.Addr())
			<-ctx.Done()
			return nil
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "", "fleet configuration file (YAML)")
	_ = cmd.MarkFlagRequired("config")
	logs.add(cmd)
	return cmd
}
