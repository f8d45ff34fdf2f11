package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/fleet"
	"switchyard/router/config"
	"switchyard/router/server"
)

func init() { register(newDemoCmd) }

// demoModel is the model the demo fleet serves.
const demoModel = "Qwen/Qwen3-0.6B"

func newDemoCmd() *cobra.Command {
	var (
		addr, shimURL     string
		record            string
		prefills, decodes int
		speedup           float64
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
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// The frontend emulation listens first, so the router's shim
			// backend can name its URL; it serves once the fleet is up.
			var feListener net.Listener
			frontendURL := shimURL
			if frontendURL == "" {
				if feListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
					return err
				}
				defer feListener.Close()
				frontendURL = "http://" + feListener.Addr().String()
			}
			token := randomToken()
			cfg, err := demoConfig(addr, token, frontendURL)
			if err != nil {
				return err
			}
			seed := newPickerSeed()
			rec, err := startRecording(record, cfg, seed, log)
			if err != nil {
				return err
			}
			srv, err := server.NewWithOptions(cfg, log, server.Options{Recorder: rec, Seed: seed})
			if err != nil {
				stopRecording(rec, log)
				return err
			}
			defer func() {
				srv.Close()
				stopRecording(rec, log)
			}()

			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
			if err != nil {
				return err
			}
			defer cli.Close()
			fl, err := fleet.Start(ctx, cli, fleet.Spec{Namespace: "dynamo", Model: demoModel,
				Prefill: prefills, Decode: decodes, SpeedupRatio: speedup, Engine: true}, log.With("component", "fleet"))
			if err != nil {
				return err
			}
			defer fl.Close()
			if feListener != nil {
				fe := &http.Server{Handler: fl.Handler(log), ReadHeaderTimeout: 10 * time.Second}
				go fe.Serve(feListener)
				defer fe.Close()
			}
			printDemo(cmd.OutOrStdout(), srv.Addr(), srv.EtcdEndpoint(), frontendURL, token, prefills, decodes)
			<-ctx.Done()
			fmt.Fprintln(cmd.OutOrStdout(), "stopping")
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "router listen address")
	cmd.Flags().StringVar(&shimURL, "shim-url", "", "a direct-mode frontend to forward pinned requests to (e.g. hack/benchshim)")
	cmd.Flags().IntVar(&prefills, "prefill", 2, "prefill workers")
	cmd.Flags().IntVar(&decodes, "decode", 2, "decode workers")
	cmd.Flags().Float64Var(&speedup, "speedup", 10, "fake workers run this many times faster than the timing model")
	cmd.Flags().StringVar(&record, "record", "", "record the router's routing core to this SQLite file (replay it with switchyard replay)")
	logs.add(cmd)
	return cmd
}

// demoConfig renders the demo's configuration as a file would say it, so
// every default is filled exactly as for `serve`. With a shim URL, the
// router pins workers and forwards to that direct-mode frontend.
func printDemo(out io.Writer, addr, etcd, frontendURL, token string, prefills, decodes int) {
	base := "http://" + addr
	fmt.Fprintf(out, "\nSwitchyard demo is running (Ctrl-C stops everything).\n\n")
	fmt.Fprintf(out, "  router        %s   (/health, /metrics, /v1/...)\n", base)
	fmt.Fprintf(out, "  model         %s (%d prefill + %d decode fake workers)\n", demoModel, prefills, decodes)
	fmt.Fprintf(out, "  frontend      %s   (direct-mode frontend emulation; faults under /fleet/)\n", frontendURL)
	fmt.Fprintf(out, "  embedded etcd %s\n", etcd)
	fmt.Fprintf(out, "  admin token   %s\n\n", token)
	fmt.Fprintf(out, "Ask the fleet something:\n\n  curl -s %s/v1/chat/completions -H 'Content-Type: application/json' \\\n", base)
	fmt.Fprintf(out, "    -d '{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}]}'\n\n", demoModel)
	fmt.Fprintf(out, "See the fleet the router discovered:\n\n  curl -s -H 'Authorization: Bearer %s' %s/admin/dynamo/workers\n\n", token, base)
}

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
