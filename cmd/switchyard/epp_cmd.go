package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"switchyard/router/config"
	"switchyard/router/server"
)

func init() { register(newEPPCmd) }

// eppFlags are the command line's endpoint-picker settings, applied over
// the file and the DYN_* variables when set.
type eppFlags struct {
	listen    string
	plaintext bool
}

func newEPPCmd() *cobra.Command {
	var (
		path, record string
		flags        eppFlags
		logs         logFlags
	)
	cmd := &cobra.Command{
		Use:   "epp [--config FILE] [--listen ADDR] [--plaintext]",
		Short: "Run the Gateway API endpoint picker: an Envoy ext_proc server on :9002",
		Long: `Run the Gateway API Inference Extension endpoint picker: an
Envoy ext_proc (v3) gRPC server that tells an inference gateway which worker's
frontend sidecar serves each request, and pins the workers with x-dynamo-*
headers, on the same routing core as the gateway of "switchyard serve".

Workers come from the configuration's Dynamo discovery: FILE, or without one the
variables Dynamo's operator sets (DYN_DISCOVERY_BACKEND=kubernetes: DynamoWorkerMetadata
in POD_NAMESPACE; otherwise etcd at ETCD_ENDPOINTS; DYN_NAMESPACE names the graph),
or with DYN_EPP_MODE=standalone the Pods of the InferencePool DYN_EPP_POOL_NAME
(in DYN_EPP_POOL_NAMESPACE, else POD_NAMESPACE), whose vLLM engines' KV events
are subscribed on each Pod's IP (port 5557 or the switchyard.dev/kv-events-port
annotation) or, with DYN_EPP_KV_EVENTS_LISTEN=host:port, received from publishers
that dial the picker (topic kv@<pod IP>@<model>); standalone needs DYN_MODEL_NAME
and DYN_KV_CACHE_BLOCK_SIZE, and renders prompts with the tokenizer and chat
template DYN_EPP_TOKENIZER and DYN_EPP_CHAT_TEMPLATE name (with their blake3
checksums in DYN_EPP_TOKENIZER_CHECKSUM and DYN_EPP_CHAT_TEMPLATE_CHECKSUM).
Dynamo's DYN_* variables are read over the file: DYN_EPP_MODE, DYN_MODEL_NAME,
DYN_KV_CACHE_BLOCK_SIZE, DYN_USE_KV_EVENTS, DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT,
DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT_DECAY, DYN_ROUTER_PREFILL_LOAD_SCALE,
DYN_ROUTER_DECODE_ACTIVE_REQUEST_WEIGHT, DYN_ROUTER_TEMPERATURE,
DYN_ROUTER_REPLICA_SYNC, DYN_ROUTER_TRACK_ACTIVE_BLOCKS,
DYN_ROUTER_TRACK_OUTPUT_BLOCKS, DYN_ROUTER_TRACK_PREFILL_TOKENS and
DYN_EPP_PEER_SERVICE (docs/epp.md). A bad value stops the start, naming the
variable. The listener serves TLS with a self-signed certificate unless
epp.cert_file/key_file or --plaintext say otherwise; the HTTP listener
(server.bind_address) keeps /health, /ready, /metrics and the admin API.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := logs.loggerTo(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			cfg := config.Default()
			if path != "" {
				if cfg, err = config.Load(path); err != nil {
					return &exitError{1, err}
				}
			} else {
				discoveryFromPlatform(cfg, os.LookupEnv)
			}
			overlay := func(c *config.Config) error { return flags.overlay(cmd, c, os.LookupEnv) }
			if err := overlay(cfg); err != nil {
				return &exitError{1, err}
			}
			return runServer(cmd, log, cfg, path, record, server.Options{Overlay: overlay}, func(srv *server.Server) {
				fmt.Fprintf(cmd.OutOrStdout(), "endpoint picker: ext_proc on %s, health and metrics on http://%s\n", srv.EPPAddr(), srv.Addr())
			})
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "", "configuration file (YAML); without one, the defaults")
	cmd.Flags().StringVar(&flags.listen, "listen", config.DefaultEPPListen, "ext_proc listen address (epp.listen)")
	cmd.Flags().BoolVar(&flags.plaintext, "plaintext", false, "serve ext_proc without TLS (epp.plaintext)")
	cmd.Flags().StringVar(&record, "record", "", "record the routing core's inputs and decisions to this SQLite file")
	logs.add(cmd)
	return cmd
}

// discoveryFromPlatform configures discovery, without a configuration
// file, from the variables Dynamo's operator gives the Pods of a graph:
// DYN_DISCOVERY_BACKEND (kubernetes: DynamoWorkerMetadata in the Pod's
// own Kubernetes namespace, POD_NAMESPACE; otherwise etcd at
// ETCD_ENDPOINTS) and DYN_NAMESPACE, the graph's Dynamo namespace. With
// DYN_EPP_MODE=standalone the workers are the Pods of an InferencePool in
// POD_NAMESPACE instead (DYN_EPP_POOL_NAME, DYN_EPP_POOL_NAMESPACE).
func discoveryFromPlatform(c *config.Config, lookup func(string) (string, bool)) {
	get := func(k, def string) string {
		if v, ok := lookup(k); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	ns := get("DYN_NAMESPACE", config.DefaultNamespace)
	d := &c.Dynamo.Discovery
	if get("DYN_EPP_MODE", "") == config.EPPModeStandalone {
		// Standalone: the workers are an InferencePool's Pods (named by
		// DYN_EPP_POOL_NAME, read over this) and their engines' own KV
		// events are what the picker routes on.
		d.Source = config.SourceInferencePool
		d.InferencePool.Namespace = get("POD_NAMESPACE", "default")
		c.Dynamo.KV.Enabled = true
		return
	}
	if get("DYN_DISCOVERY_BACKEND", "") == "kubernetes" {
		d.Source = config.SourceKubernetes
		d.Kubernetes.Namespace = get("POD_NAMESPACE", "default")
		d.Kubernetes.DynamoNamespace = ns
		return
	}
	d.Source = config.SourceEtcd
	d.Etcd.Namespace = ns
	if eps := get("ETCD_ENDPOINTS", ""); eps != "" {
		d.Etcd.Endpoints = strings.Split(eps, ",")
	}
}

// overlay turns the endpoint picker on in c, lays the DYN_* variables and
// the set flags over it, and checks the result, naming the variable that
// set a field with a problem.
func (f eppFlags) overlay(cmd *cobra.Command, c *config.Config, lookup func(string) (string, bool)) error {
	c.EPP.Enabled, c.Dynamo.Enabled = true, true
	from, err := config.ApplyEPPVariables(c, lookup)
	if err != nil {
		return err
	}
	if cmd.Flags().Changed("listen") || c.EPP.Listen == "" {
		c.EPP.Listen = f.listen
	}
	if cmd.Flags().Changed("plaintext") {
		c.EPP.Plaintext = f.plaintext
	}
	errs, _ := c.Validate()
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		if name, ok := from[e.Path]; ok {
			msgs = append(msgs, fmt.Sprintf("%s (%s): %s", name, e.Path, e.Message))
		} else {
			msgs = append(msgs, e.String())
		}
	}
	return errors.New("invalid endpoint-picker configuration: " + strings.Join(msgs, "; "))
}
