package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/registrar"
	"switchyard/router/config"
	"switchyard/router/server"
)

func init() { register(newDemoCmd) }

// demoModel is the model the demo fleet serves.
const demoModel = "Qwen/Qwen3-0.6B"

func newDemoCmd() *cobra.Command {
	var (
		addr, shimURL     string
		prefills, decodes int
		logs              logFlags
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run an embedded etcd, a fake Dynamo fleet and the router on loopback",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger()
			if err != nil {
				return err
			}
			token := randomToken()
			cfg, err := demoConfig(addr, token, shimURL)
			if err != nil {
				return err
			}
			srv, err := server.New(cfg, log)
			if err != nil {
				return err
			}
			defer srv.Close()

			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
			if err != nil {
				return err
			}
			defer cli.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var regs []*registrar.Registration
			defer func() {
				c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				for _, r := range regs {
					_ = r.Deregister(c)
				}
			}()
			for i := 0; i < prefills+decodes; i++ {
				role := "prefill"
				if i >= prefills {
					role = "decode"
				}
				r, err := registrar.Register(ctx, cli, registrar.Worker{
					Namespace: "dynamo", Component: role, WorkerType: role, Model: demoModel, BlockSize: 16,
					TotalKVBlocks: 8192, MaxNumBatchedTokens: 8192, MaxNumSeqs: 256, ContextLength: 32768,
					DPSize: 1, Transport: fmt.Sprintf("127.0.0.1:0/demo/%s/%d", role, i),
				}, registrar.DefaultTTL)
				if err != nil {
					return fmt.Errorf("register demo worker: %w", err)
				}
				regs = append(regs, r)
			}

			base := "http://" + srv.Addr()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "\nSwitchyard demo is running (Ctrl-C stops everything).\n\n")
			fmt.Fprintf(out, "  router        %s\n", base)
			fmt.Fprintf(out, "  health        %s/health\n", base)
			fmt.Fprintf(out, "  metrics       %s/metrics\n", base)
			fmt.Fprintf(out, "  embedded etcd %s\n", srv.EtcdEndpoint())
			fmt.Fprintf(out, "  model         %s (%d prefill + %d decode workers)\n", demoModel, prefills, decodes)
			fmt.Fprintf(out, "  admin token   %s\n\n", token)
			fmt.Fprintf(out, "See the fleet the router discovered:\n\n  curl -s -H 'Authorization: Bearer %s' %s/admin/dynamo/workers\n\n", token, base)
			<-ctx.Done()
			fmt.Fprintln(out, "stopping")
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "router listen address")
	cmd.Flags().StringVar(&shimURL, "shim-url", "", "a direct-mode frontend to forward pinned requests to (e.g. hack/benchshim)")
	cmd.Flags().IntVar(&prefills, "prefill", 2, "prefill workers")
	cmd.Flags().IntVar(&decodes, "decode", 2, "decode workers")
	logs.add(cmd)
	return cmd
}

// demoConfig renders the demo's configuration as a file would say it, so
// every default is filled exactly as for `serve`. With a shim URL, the
// router pins workers and forwards to that direct-mode frontend.
func demoConfig(addr, token, shimURL string) (*config.Config, error) {
	y := fmt.Sprintf(`server: {bind_address: %q}
admin: {token: %q}
dynamo:
  enabled: true
  discovery:
    etcd:
      embedded: {enabled: true, listen: "127.0.0.1:0"}
  load:
    direct_allow_cidrs: ["127.0.0.0/8"]
`, addr, token)
	if shimURL != "" {
		y += fmt.Sprintf(`  shim:
    backends: [dynamo-frontend]
disaggregated_serving: {enabled: true}
backends:
  - {name: dynamo-frontend, type: openai, url: %q, role: unified, models: [%q]}
`, shimURL, demoModel)
	}
	return config.Parse([]byte(y), nil)
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
