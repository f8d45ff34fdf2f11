package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/engine/perf"
	"switchyard/fakefleet/fleet"
	"switchyard/fixtures"
	"switchyard/recorder"
	"switchyard/router/config"
	"switchyard/router/discoverysource/etcdsource/embedded"
	"switchyard/router/server"
)

func init() { register(newDemoCmd) }

// demoModel is the model the demo fleet serves.
const demoModel = "Qwen/Qwen3-0.6B"

// frontendStopWait bounds how long the frontend emulation's last
// connections may take to finish once the router has drained; by then
// nothing should be in flight there.
const frontendStopWait = 5 * time.Second

// demoOptions are the demo command's flags.
type demoOptions struct {
	addr, shimURL     string
	record            string
	prefills, decodes int
	speedup           float64
	drain             time.Duration
	kv                bool
	// profile is an engine profile file the fake workers run on.
	profile string
}

func newDemoCmd() *cobra.Command {
	var (
		o    demoOptions
		logs logFlags
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run an embedded etcd, a fake Dynamo fleet and the router on loopback",
		Long: "Run an embedded etcd, a fake Dynamo fleet registered in it, an emulation of Dynamo's\n" +
			"direct-mode frontend in front of the fleet, and the router. Ctrl-C (or SIGTERM) first\n" +
			"drains the router (requests in flight finish, up to --drain-timeout), then stops the\n" +
			"frontend, the fleet and etcd; a second Ctrl-C quits at once.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.logger()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// After the first signal the default action returns, so a
			// second one ends the process without waiting for the drain.
			context.AfterFunc(ctx, stop)
			return runDemo(ctx, o, cmd.OutOrStdout(), log)
		},
	}
	cmd.Flags().StringVar(&o.addr, "addr", "127.0.0.1:8080", "router listen address")
	cmd.Flags().StringVar(&o.shimURL, "shim-url", "", "a direct-mode frontend to forward pinned requests to (e.g. hack/benchshim)")
	cmd.Flags().IntVar(&o.prefills, "prefill", 2, "prefill workers")
	cmd.Flags().IntVar(&o.decodes, "decode", 2, "decode workers")
	cmd.Flags().Float64Var(&o.speedup, "speedup", 10, "fake workers run this many times faster than the timing model")
	cmd.Flags().StringVar(&o.record, "record", "", "record the router's routing core to this SQLite file (replay it with switchyard replay)")
	cmd.Flags().StringVar(&o.profile, "profile", "", "run the fake workers on this engine profile (docs/engine-model.md#profiles) instead of the mocker's timing")
	cmd.Flags().BoolVar(&o.kv, "kv", true, "KV-aware routing: the fleet's cards name the project's test tokenizer, pinned in the router's configuration")
	cmd.Flags().DurationVar(&o.drain, "drain-timeout", config.DefaultShutdownGrace, "on stop, how long requests in flight may take to finish (gateway.shutdown_grace)")
	logs.add(cmd)
	return cmd
}

// runDemo runs the demo until ctx is done, then stops it in order.
func runDemo(ctx context.Context, o demoOptions, out io.Writer, log *slog.Logger) error {
	d, err := startDemo(ctx, o, log)
	if err != nil {
		return err
	}
	d.printBanner(out)
	<-ctx.Done()
	fmt.Fprintf(out, "stopping: draining requests in flight (up to %s; Ctrl-C again quits at once)\n", o.drain)
	d.stop()
	return nil
}

// demo is a running demo stack. It owns the etcd the fleet registers in
// and the router discovers from, so that the router can be drained while
// the frontend, the fleet and etcd still serve what is in flight.
type demo struct {
	log         *slog.Logger
	etcd        *embedded.Embedded
	etcdDir     string
	cli         *clientv3.Client
	fleet       *fleet.Fleet
	frontend    *http.Server // nil with --shim-url
	frontendURL string
	token       string
	rec         *recorder.Writer
	srv         *server.Server
	prefills    int
	decodes     int
	kv          bool
	profile     string // the engine profile's name, "" on the mocker
	stopOnce    sync.Once
}

// startDemo starts etcd, the fleet, the frontend emulation and the
// router, in that order: the router comes up with the fleet already
// registered. On an error, what was started is stopped.
func startDemo(ctx context.Context, o demoOptions, log *slog.Logger) (*demo, error) {
	d := &demo{log: log, token: randomToken(), prefills: o.prefills, decodes: o.decodes, kv: o.kv}
	if err := d.start(ctx, o); err != nil {
		d.stop()
		return nil, err
	}
	return d, nil
}

func (d *demo) start(ctx context.Context, o demoOptions) error {
	var profile *perf.Profile
	if o.profile != "" {
		p, err := perf.LoadProfile(o.profile)
		if err != nil {
			return fmt.Errorf("--profile: %w", err)
		}
		profile, d.profile = &p, p.Name
	}
	err := d.startEtcd()
	if err != nil {
		return err
	}
	if d.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{d.etcd.Endpoint()}, DialTimeout: 5 * time.Second}); err != nil {
		return err
	}
	spec := fleet.Spec{Namespace: "dynamo", Model: demoModel,
		Prefill: o.prefills, Decode: o.decodes, SpeedupRatio: o.speedup, Engine: true, Profile: profile}
	if o.kv {
		if spec.Artifacts, err = writeDemoArtifacts(d.etcdDir); err != nil {
			return err
		}
	}
	d.fleet, err = fleet.Start(ctx, d.cli, spec, d.log.With("component", "fleet"))
	if err != nil {
		return err
	}
	d.frontendURL = o.shimURL
	if d.frontendURL == "" {
		if err := d.startFrontend(); err != nil {
			return err
		}
	}
	return d.startRouter(o)
}

func (d *demo) startEtcd() error {
	dir, err := os.MkdirTemp("", "switchyard-demo-etcd-")
	if err != nil {
		return err
	}
	d.etcdDir = dir
	d.etcd, err = embedded.Start(embedded.Options{Dir: filepath.Join(dir, "data"), ClientAddr: "127.0.0.1:0", NoFsync: true})
	if err != nil {
		return err
	}
	d.log.Info("embedded etcd serving", "endpoint", d.etcd.Endpoint())
	return nil
}

func (d *demo) startFrontend() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	d.frontendURL = "http://" + ln.Addr().String()
	d.frontend = &http.Server{Handler: d.fleet.Handler(d.log), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := d.frontend.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("frontend emulation stopped", "error", err)
		}
	}()
	return nil
}

func (d *demo) startRouter(o demoOptions) error {
	var pins []string
	if o.kv {
		pins = d.fleet.Checksums()
	}
	cfg, err := demoConfig(o.addr, d.token, d.etcd.Endpoint(), d.frontendURL, o.drain, pins, filepath.Join(d.etcdDir, "artifacts"))
	if err != nil {
		return err
	}
	seed := newPickerSeed()
	if d.rec, err = startRecording(o.record, cfg, seed, d.log); err != nil {
		return err
	}
	d.srv, err = server.NewWithOptions(cfg, d.log, server.Options{Recorder: d.rec, Seed: seed})
	return err
}

// stop drains the router first: it stops accepting, lets requests in
// flight (streams included) finish on the frontend and fleet that still
// serve them, for up to the drain timeout, and only then is the recording
// closed and the frontend, the fleet and etcd stopped. Nothing waits
// longer than its work takes, so an idle stop is prompt. Safe on a
// partly started demo, and to call again.
func (d *demo) stop() { d.stopOnce.Do(d.stopInOrder) }

func (d *demo) stopInOrder() {
	if d.srv != nil {
		d.srv.Close()
	}
	stopRecording(d.rec, d.log)
	if d.frontend != nil {
		ctx, cancel := context.WithTimeout(context.Background(), frontendStopWait)
		if err := d.frontend.Shutdown(ctx); err != nil {
			_ = d.frontend.Close()
		}
		cancel()
	}
	if d.fleet != nil {
		d.fleet.Close()
	}
	if d.cli != nil {
		_ = d.cli.Close()
	}
	if d.etcd != nil {
		d.etcd.Close()
	}
	if d.etcdDir != "" {
		_ = os.RemoveAll(d.etcdDir)
	}
}

// demoIngress is one of the router's client-facing routes, with a first
// request for the banner.
type demoIngress struct {
	what, path, body string
}

// demoIngresses cover every ingress the gateway serves; each body is a
// format with the model as its only verb.
var demoIngresses = []demoIngress{
	{"an OpenAI chat completion", "/v1/chat/completions", `{"model": %q, "messages": [{"role": "user", "content": "Hello!"}]}`},
	{"an OpenAI text completion", "/v1/completions", `{"model": %q, "prompt": "Once upon a time", "max_tokens": 16}`},
	{"an Anthropic message", "/v1/messages", `{"model": %q, "max_tokens": 16, "messages": [{"role": "user", "content": "Hello!"}]}`},
	{"an OpenAI Responses response", "/v1/responses", `{"model": %q, "input": "Hello!"}`},
}

func (d *demo) printBanner(out io.Writer) {
	base := "http://" + d.srv.Addr()
	fmt.Fprintf(out, "\nSwitchyard demo is running (Ctrl-C stops everything).\n\n")
	fmt.Fprintf(out, "  router        %s   (/health, /metrics, /v1/...)\n", base)
	engine := ""
	if d.profile != "" {
		engine = " on engine profile " + d.profile
	}
	fmt.Fprintf(out, "  model         %s (%d prefill + %d decode fake workers%s)\n", demoModel, d.prefills, d.decodes, engine)
	fmt.Fprintf(out, "  frontend      %s   (direct-mode frontend emulation; faults under /fleet/)\n", d.frontendURL)
	fmt.Fprintf(out, "  embedded etcd %s\n", d.etcd.Endpoint())
	fmt.Fprintf(out, "  admin token   %s\n\n", d.token)
	fmt.Fprintf(out, "Ask the fleet something (add \"stream\": true to any body for server-sent events):\n\n")
	for _, in := range demoIngresses {
		fmt.Fprintf(out, "  # %s\n  curl -s %s%s -H 'Content-Type: application/json' \\\n", in.what, base, in.path)
		fmt.Fprintf(out, "    -d '%s'\n\n", fmt.Sprintf(in.body, demoModel))
	}
	fmt.Fprintf(out, "  # the models it serves\n  curl -s %s/v1/models\n\n", base)
	fmt.Fprintf(out, "See the fleet the router discovered:\n\n  curl -s -H 'Authorization: Bearer %s' %s/admin/dynamo/workers\n\n", d.token, base)
	if d.kv {
		fmt.Fprintf(out, "KV-aware routing is on: the router renders and tokenizes each prompt with the fleet's pinned\n"+
			"test tokenizer. Send the same long chat twice; the second lands on the worker that cached it:\n\n"+
			"  curl -s %s/metrics | grep 'switchyard_dynamo_kv_selection_total'\n\n", base)
	}
}

// demoConfig renders the demo's configuration as a file would say it, so
// every default is filled exactly as for `serve`: discovery from the
// demo's etcd, and the frontend at frontendURL as the one shim backend,
// to which the router forwards pinned requests.
// With pins, KV-aware selection is on and may load exactly those
// artifacts (the fleet's tokenizer files).
func demoConfig(addr, token, etcd, frontendURL string, drain time.Duration, pins []string, cacheDir string) (*config.Config, error) {
	kv := ""
	if len(pins) > 0 {
		quoted := make([]string, len(pins))
		for i, p := range pins {
			quoted[i] = strconv.Quote(p)
		}
		kv = fmt.Sprintf("  kv: {enabled: true, artifact_cache_dir: %q, pinned_artifacts: [%s]}\n", cacheDir, strings.Join(quoted, ", "))
	}
	y := fmt.Sprintf(`server: {bind_address: %q}
admin: {token: %q}
gateway: {shutdown_grace: %q}
dynamo:
  enabled: true
  discovery:
    etcd:
      endpoints: [%q]
  load:
    direct_allow_cidrs: ["127.0.0.0/8"]
  shim:
    backends: [dynamo-frontend]
%sdisaggregated_serving: {enabled: true}
backends:
  - {name: dynamo-frontend, type: openai, url: %q, role: unified, models: [%q]}
`, addr, token, drain.String(), etcd, kv, frontendURL, demoModel)
	return config.Parse([]byte(y), nil)
}

// writeDemoArtifacts writes the project's test tokenizer and its
// tokenizer_config.json (chat template) under dir, for the fleet's cards.
func writeDemoArtifacts(dir string) (*fleet.Artifacts, error) {
	out := filepath.Join(dir, "tokenizer")
	if err := os.MkdirAll(out, 0o700); err != nil {
		return nil, err
	}
	a := &fleet.Artifacts{TokenizerPath: filepath.Join(out, fixtures.TokenizerJSON), ConfigPath: filepath.Join(out, fixtures.TokenizerConfig)}
	for name, path := range map[string]string{fixtures.TokenizerJSON: a.TokenizerPath, fixtures.TokenizerConfig: a.ConfigPath} {
		data, err := fixtures.TokenizerFile(fixtures.TestTokenizer, name)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return a, nil
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
