package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"switchyard/internal/syncbuf"
	"switchyard/router/config"
)

// A bad DYN_* value stops the endpoint picker before anything starts,
// naming the variable.
func TestEPPRefusesBadVariables(t *testing.T) {
	for env, want := range map[[2]string]string{
		{"DYN_ROUTER_TEMPERATURE", "warm"}:                `DYN_ROUTER_TEMPERATURE="warm": must be a finite number`,
		{"DYN_ROUTER_TEMPERATURE", "-1"}:                  "DYN_ROUTER_TEMPERATURE (dynamo.kv.router_temperature): must be >= 0",
		{"DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT", "2"}:       "DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT (dynamo.kv.overlap_score_credit): must be between 0.0 and 1.0",
		{"DYN_USE_KV_EVENTS", "maybe"}:                    `DYN_USE_KV_EVENTS="maybe": must be true or false`,
		{"DYN_KV_CACHE_BLOCK_SIZE", "sixteen"}:            `DYN_KV_CACHE_BLOCK_SIZE="sixteen": must be an integer`,
		{"DYN_EPP_MODE", "sidecar"}:                       `DYN_EPP_MODE (epp.mode): must be dynamo or standalone, got "sidecar"`,
		{"DYN_ROUTER_REPLICA_SYNC", "often"}:              `DYN_ROUTER_REPLICA_SYNC="often": must be true or false`,
		{"DYN_ROUTER_DECODE_ACTIVE_REQUEST_WEIGHT", "-1"}: "DYN_ROUTER_DECODE_ACTIVE_REQUEST_WEIGHT (dynamo.kv.decode_active_request_weight): must be a number >= 0",
	} {
		t.Run(env[0]+"="+env[1], func(t *testing.T) {
			t.Setenv(env[0], env[1])
			out, err := run(t, "epp", "--plaintext", "--listen", "127.0.0.1:0")
			requireExit1(t, err)
			assert.Contains(t, err.Error()+out, want)
		})
	}
}

// The variables land in the fields they name, over the file's values;
// flags win over both; unset variables leave the file alone.
func TestEPPVariablesOverlayTheFile(t *testing.T) {
	env := map[string]string{
		"DYN_MODEL_NAME": "Qwen/Qwen3-32B", "DYN_KV_CACHE_BLOCK_SIZE": "64", "DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT": "0.5",
		"DYN_ROUTER_PREFILL_LOAD_SCALE": "8", "DYN_ROUTER_TEMPERATURE": "0.2", "DYN_USE_KV_EVENTS": "0",
		"DYN_ROUTER_TRACK_ACTIVE_BLOCKS": "true", "DYN_ROUTER_TRACK_PREFILL_TOKENS": "false", "DYN_EPP_MODE": "dynamo",
		"DYN_ROUTER_TRACK_OUTPUT_BLOCKS": "true",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c := config.Default()
	c.EPP.TargetPort = 8001
	c.Dynamo.Discovery.Etcd.Endpoints = []string{"127.0.0.1:2379"}
	cmd := newEPPCmd()
	require.NoError(t, cmd.Flags().Set("plaintext", "true"))
	require.NoError(t, eppFlags{listen: config.DefaultEPPListen, plaintext: true}.overlay(cmd, c, lookup))
	assert.True(t, c.EPP.Enabled)
	assert.True(t, c.Dynamo.Enabled)
	assert.True(t, c.EPP.Plaintext)
	assert.Equal(t, "Qwen/Qwen3-32B", c.EPP.ModelName)
	assert.Equal(t, 64, c.EPP.KVCacheBlockSize)
	assert.Equal(t, 0.5, c.Dynamo.KV.OverlapScoreCredit)
	assert.Equal(t, 8.0, c.Dynamo.KV.PrefillLoadScale)
	assert.Equal(t, 0.2, c.Dynamo.KV.RouterTemperature)
	assert.False(t, c.Dynamo.KV.UseKVEvents, "DYN_USE_KV_EVENTS=0 predicts cache state from picks")
	assert.True(t, c.Dynamo.KV.TrackActiveBlocks, "DYN_ROUTER_TRACK_* set dynamo.kv.track_*")
	assert.False(t, c.Dynamo.KV.TrackPrefillTokens)
	assert.True(t, c.Dynamo.KV.TrackOutputBlocks, "predicted output blocks are live")
	errs, _ := c.Validate()
	assert.Empty(t, errs)
	assert.Equal(t, 8001, c.EPP.TargetPort, "a field no variable names keeps the file's value")
	assert.Equal(t, config.DefaultEPPListen, c.EPP.Listen)
}

// The built binary serves ext_proc and its health service, with the
// variables applied, and stops cleanly on SIGINT.
func TestEPPBinaryServes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	cfgPath := filepath.Join(t.TempDir(), "epp.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(fmt.Sprintf(`server: {bind_address: %q}
dynamo:
  discovery:
    etcd:
      embedded: {enabled: true, listen: "127.0.0.1:0"}
`, freeAddr(t))), 0o600))
	addr := freeAddr(t)
	cmd := exec.Command(bin, "epp", "--config", cfgPath, "--plaintext", "--listen", addr)
	cmd.Env = append(os.Environ(), "DYN_MODEL_NAME=Qwen/Qwen3-0.6B", "DYN_ROUTER_PREFILL_LOAD_SCALE=4")
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	waitFor(t, 30*time.Second, "the banner", func() bool { return strings.Contains(out.String(), "endpoint picker: ext_proc on "+addr) })

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	waitFor(t, 30*time.Second, "readiness", func() bool {
		r, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "readiness"})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait())
	assert.NotContains(t, out.String(), "panic")
}

// Without a file, discovery follows the variables Dynamo's operator gives
// a graph's Pods.
func TestEPPDiscoveryFromThePlatform(t *testing.T) {
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	c := config.Default()
	discoveryFromPlatform(c, env(map[string]string{"DYN_DISCOVERY_BACKEND": "kubernetes", "POD_NAMESPACE": "llm", "DYN_NAMESPACE": "vllm-disagg"}))
	d := c.Dynamo.Discovery
	assert.Equal(t, config.SourceKubernetes, d.Source)
	assert.Equal(t, "llm", d.Kubernetes.Namespace)
	assert.Equal(t, "vllm-disagg", d.Kubernetes.DynamoNamespace)

	c = config.Default()
	discoveryFromPlatform(c, env(map[string]string{"ETCD_ENDPOINTS": "http://etcd-0:2379,http://etcd-1:2379", "DYN_NAMESPACE": "g"}))
	d = c.Dynamo.Discovery
	assert.Equal(t, config.SourceEtcd, d.Source)
	assert.Equal(t, []string{"http://etcd-0:2379", "http://etcd-1:2379"}, d.Etcd.Endpoints)
	assert.Equal(t, "g", d.Etcd.Namespace)

	c = config.Default()
	discoveryFromPlatform(c, env(map[string]string{"DYN_DISCOVERY_BACKEND": "kubernetes"}))
	assert.Equal(t, "default", c.Dynamo.Discovery.Kubernetes.Namespace)
	assert.Equal(t, config.DefaultNamespace, c.Dynamo.Discovery.Kubernetes.DynamoNamespace)
	cmd := newEPPCmd()
	require.NoError(t, eppFlags{listen: config.DefaultEPPListen}.overlay(cmd, c, env(nil)), "a valid endpoint-picker configuration")
}

// DYN_EPP_MODE=standalone without a file reads the workers from the pool
// the variables name, in the Pod's namespace, and refuses to start
// without the block size its Pods cannot tell.
func TestEPPStandaloneFromVariables(t *testing.T) {
	env := map[string]string{"DYN_EPP_MODE": "standalone", "DYN_EPP_POOL_NAME": "llama", "POD_NAMESPACE": "serving",
		"DYN_MODEL_NAME": "meta-llama/Llama-3.1-8B-Instruct"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c := config.Default()
	discoveryFromPlatform(c, lookup)
	cmd := newEPPCmd()
	err := eppFlags{listen: config.DefaultEPPListen}.overlay(cmd, c, lookup)
	require.ErrorContains(t, err, "epp.kv_cache_block_size: is required in standalone mode")
	env["DYN_KV_CACHE_BLOCK_SIZE"] = "16"
	require.NoError(t, eppFlags{listen: config.DefaultEPPListen}.overlay(cmd, c, lookup))
	d := c.Dynamo.Discovery
	assert.Equal(t, config.SourceInferencePool, d.Source)
	assert.Equal(t, config.InferencePoolDiscovery{Name: "llama", Namespace: "serving", KVEventsPort: 5557}, d.InferencePool)
	assert.True(t, c.Dynamo.KV.Enabled, "standalone routes on the engines' KV events")
}

// The standalone pool's tokenizer, chat template and bound listener come
// from DYN_EPP_* variables too, and a bad checksum names its variable.
func TestEPPStandalonePromptVariables(t *testing.T) {
	const sum = "blake3:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	env := map[string]string{"DYN_EPP_MODE": "standalone", "DYN_EPP_POOL_NAME": "llama", "DYN_MODEL_NAME": "m",
		"DYN_KV_CACHE_BLOCK_SIZE": "16", "DYN_EPP_TOKENIZER": "/models/m/tokenizer.json", "DYN_EPP_TOKENIZER_CHECKSUM": "blake3:nope",
		"DYN_EPP_CHAT_TEMPLATE": "/models/m/chat_template.jinja", "DYN_EPP_CHAT_TEMPLATE_CHECKSUM": sum,
		"DYN_EPP_KV_EVENTS_LISTEN": "0.0.0.0:5557"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c := config.Default()
	discoveryFromPlatform(c, lookup)
	cmd := newEPPCmd()
	err := eppFlags{listen: config.DefaultEPPListen}.overlay(cmd, c, lookup)
	require.ErrorContains(t, err, "DYN_EPP_TOKENIZER_CHECKSUM (dynamo.discovery.inference_pool.tokenizer.checksum)")
	env["DYN_EPP_TOKENIZER_CHECKSUM"] = sum
	require.NoError(t, eppFlags{listen: config.DefaultEPPListen}.overlay(cmd, c, lookup))
	ip := c.Dynamo.Discovery.InferencePool
	assert.Equal(t, config.PoolArtifact{Path: "/models/m/tokenizer.json", Checksum: sum}, ip.Tokenizer)
	assert.Equal(t, config.KindChatTemplate, ip.ChatTemplate.TemplateKind())
	assert.Equal(t, "0.0.0.0:5557", ip.KVEventsListen)
	assert.Equal(t, []string{sum}, c.ArtifactPins())
}
