package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"switchyard/internal/kubetest"
	"switchyard/internal/syncbuf"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource/k8ssource"
	"switchyard/router/server"
)

// The shipped router and fleet pair, moved to Kubernetes discovery: the
// fleet publishes its workers as Pods, DynamoWorkerMetadata and
// EndpointSlices on a real API server, the router discovers them with the
// metadata source, follows their load and KV events, and serves chat
// completions KV-aware through the fleet's frontend emulation. The run is
// recorded, Kubernetes discovery included, and replays exactly.
func TestFleetOnKubernetesServesChat(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an API server, a fleet and a router")
	}
	kubetest.InstallCRDs(t, "../../deploy/kubernetes/crds")
	kubeconfig := kubetest.Kubeconfig(t)
	t.Setenv("KUBECONFIG", kubeconfig)
	ns := kubetest.Namespace(t)

	cfg, ff := loadShippedPair(t)
	cfg.Dynamo.Discovery.Source = config.SourceKubernetes
	cfg.Dynamo.Discovery.Kubernetes.Namespace = ns
	cfg.Dynamo.Discovery.Kubernetes.DynamoNamespace = ff.Namespace
	cfg.Dynamo.Discovery.Etcd.Embedded.Enabled = false
	ff.Discovery.Source = config.SourceKubernetes
	ff.Discovery.Kubernetes.Namespace = ns
	ff.Discovery.Kubernetes.Kubeconfig = kubeconfig
	errs, _ := ff.validate()
	require.Empty(t, errs)

	log := slog.New(slog.DiscardHandler)
	db := filepath.Join(t.TempDir(), "kube.db")
	const seed = 7
	rec, err := startRecording(db, cfg, seed, log)
	require.NoError(t, err)
	srv, err := server.NewWithOptions(cfg, log, server.Options{Recorder: rec, Seed: seed})
	require.NoError(t, err)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			srv.Close()
			_, err := rec.Close()
			require.NoError(t, err)
		}
	}
	defer stop()
	rf, err := startFleet(t.Context(), ff, log)
	require.NoError(t, err)
	defer rf.Close()

	// Every worker is a ready Pod named after its role, and the router
	// knows it by hash_pod_name of that name.
	pods, err := kubetest.Client(t).CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, pods.Items, len(rf.fleet.Members()))
	ids := map[uint64]bool{}
	for _, p := range pods.Items {
		ids[k8ssource.HashPodName(p.Name)] = true
	}
	for _, m := range rf.fleet.Members() {
		require.True(t, ids[m.ID()], "member %x is a Pod's hash", m.ID())
	}

	base := "http://" + srv.Addr()
	body := `{"model": "` + ff.Model + `", "max_tokens": 4, "messages": [{"role": "user", "content": "Hello!"}]}`
	waitFor(t, 60*time.Second, "a chat completion routed KV-aware", func() bool {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(got))
			return false
		}
		var chat struct {
			Choices []struct{ Message struct{ Content string } }
		}
		require.NoError(t, json.Unmarshal(got, &chat))
		require.Len(t, chat.Choices, 1)
		return scrape(t, base, `switchyard_dynamo_kv_prompts_total{result="ok"}`) > 0
	})
	require.Positive(t, scrape(t, base, `switchyard_dynamo_workers{role="decode"}`))

	// A killed worker's Pod goes not ready and the router drops it.
	victim := rf.fleet.Members()[0].ID()
	require.NoError(t, rf.fleet.Kill(victim))
	waitFor(t, 30*time.Second, "the killed worker to leave", func() bool {
		_, ok := srv.Registry().Snapshot().Worker(discovery.WorkerKey{Namespace: ff.Namespace, InstanceID: victim})
		return !ok
	})
	require.Len(t, srv.Registry().Snapshot().Workers, len(rf.fleet.Members()))
	for i := range 4 {
		chat := fmt.Sprintf(`{"model": %q, "max_tokens": 3, "messages": [{"role": "user", "content": "after the kill %d"}]}`, ff.Model, i)
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(chat))
		require.NoError(t, err)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, string(got))
	}

	stop()
	out, err := run(t, "replay", db)
	require.NoError(t, err, out)
	require.Contains(t, out, "every selection reproduced")
	require.Contains(t, out, "(100.00%)")
}

// `switchyard fleet --discovery kubernetes_pods` publishes the workers as
// labelled, ready Pods only, and deletes them when it stops.
func TestFleetCommandOnKubernetesPods(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	kubeconfig := kubetest.Kubeconfig(t)
	ns := kubetest.Namespace(t)
	bin := buildBinary(t)
	cfg := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`etcd: {endpoints: ["127.0.0.1:1"]}
frontend: %q
namespace: dynamo
model: m
workers: {prefill: 1, decode: 2}
speedup_ratio: 100
`, freeAddr(t))), 0o600))
	cmd := exec.Command(bin, "fleet", "--config", cfg, "--discovery", "kubernetes_pods", "--kube-namespace", ns, "--kubeconfig", kubeconfig)
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()

	client := kubetest.Client(t)
	ready := func() int {
		pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{
			LabelSelector: "nvidia.com/dynamo-discovery-backend=kubernetes,nvidia.com/dynamo-namespace=dynamo"})
		require.NoError(t, err)
		n := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == "Ready" && c.Status == "True" && p.Status.Phase == "Running" {
					n++
				}
			}
		}
		return n
	}
	waitFor(t, 30*time.Second, "three ready worker Pods", func() bool { return ready() == 3 })
	waitFor(t, 10*time.Second, "the serving banner", func() bool { return strings.Contains(out.String(), "3 workers serving m") })
	slices, err := client.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, slices.Items, "the Pod shape writes Pods only")

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait())
	pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, pods.Items, "a clean stop deletes the workers' Pods")
}
