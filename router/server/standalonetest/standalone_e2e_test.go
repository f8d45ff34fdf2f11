// Package standalonetest runs the endpoint picker's standalone mode end to
// end against real peers: an InferencePool and its Pods on envtest's
// kube-apiserver, one llm-d-inference-sim (an independent vLLM emulator)
// per Pod publishing vLLM KV events to the picker's bound listener, and the
// gateway stand-in sending requests through the picker to the Pods.
//
// It is its own package because it runs envtest beside a whole router,
// whose client-go goroutines the router package's leak check would flag.
package standalonetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"switchyard/fixtures"
	"switchyard/internal/extproctest"
	"switchyard/internal/kubetest"
	"switchyard/router/config"
	"switchyard/router/prompt/artifacts"
	"switchyard/router/server"
)

func TestMain(m *testing.M) {
	code := m.Run()
	kubetest.Stop()
	os.Exit(code)
}

const (
	// inferenceExtension is the module whose InferencePool CRD the test
	// installs, at the version the router's types come from.
	inferenceExtension = "sigs.k8s.io/gateway-api-inference-extension@v1.5.0"
	// simEnv names the llm-d-inference-sim binary; the Makefile sets it
	// to what hack/inference-sim/build.sh builds.
	simEnv     = "SWITCHYARD_INFERENCE_SIM"
	simVersion = "v0.10.2"
	simModel   = "sim-model"
	blockSize  = 16
)

var inferencePools = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// simBinary finds llm-d-inference-sim: $SWITCHYARD_INFERENCE_SIM, else
// where hack/inference-sim/build.sh puts it. Missing, the test fails in CI
// (which builds it) and skips elsewhere, saying how to get it.
func simBinary(t *testing.T) string {
	t.Helper()
	path := os.Getenv(simEnv)
	if path == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		path = filepath.Join(cache, "switchyard", "inference-sim", simVersion, "llm-d-inference-sim")
	}
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return path
	}
	msg := fmt.Sprintf("llm-d-inference-sim %s not found at %s: run `make inference-sim` (hack/inference-sim/build.sh) and set %s=$(hack/inference-sim/build.sh --path)",
		simVersion, path, simEnv)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this test may not skip)", msg)
	}
	t.Skip(msg)
	return ""
}

// pod is one worker Pod: its IP, the emulator serving it, and the
// forwarder at <pod IP>:<target port> that counts the requests it gets.
type pod struct {
	name, ip string
	// namedEvents publishes vLLM's named (map) event form instead of the
	// positional one.
	namedEvents bool
	simPort     int
	served      atomic.Int64
}

// TestStandaloneRoutesOnTheEnginesKVEvents: three Pods of an InferencePool,
// each an llm-d-inference-sim that dials the picker's KV event listener
// with the topic kv@<POD_IP>@<model>. A prompt cached on one Pod (sent to
// it directly, so only its KV events can tell the picker) draws every
// request repeating its prefix to that Pod through the picker; another
// prefix cached elsewhere goes there; a Pod made unready is no longer
// picked. Chat requests are rendered with the tokenizer the pool's
// settings name.
func TestStandaloneRoutesOnTheEnginesKVEvents(t *testing.T) {
	sim := simBinary(t)
	kubetest.InstallCRDs(t, kubetest.ModuleFile(t, inferenceExtension, "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml"))
	t.Setenv("KUBECONFIG", kubetest.Kubeconfig(t))
	ns := kubetest.Namespace(t)
	cs := kubetest.Client(t)
	ctx := context.Background()

	pods := []*pod{{name: "sim-0", ip: "127.0.0.10"}, {name: "sim-1", ip: "127.0.0.11"}, {name: "sim-2", ip: "127.0.0.12", namedEvents: true}}
	targetPort := startForwarders(t, pods)
	dc, err := dynamic.NewForConfig(kubetest.Config(t))
	require.NoError(t, err)
	_, err = dc.Resource(inferencePools).Namespace(ns).Create(ctx, poolObject(ns, "sims", targetPort), metav1.CreateOptions{})
	require.NoError(t, err)
	for _, p := range pods {
		createReadyPod(t, cs, ns, p)
	}

	srv := startPicker(t, ns)
	for _, p := range pods {
		startSim(t, sim, p, srv.KVListenerAddr())
	}
	eventually(t, "three workers", func() bool { return len(srv.Discovery().Snapshot().Workers) == 3 })
	eventually(t, "every emulator's publisher connected", func() bool {
		return metric(t, srv, "switchyard_dynamo_kv_listener_connections") == 3
	})

	conn, err := grpc.NewClient(srv.EPPAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	gw := httptest.NewServer(&extproctest.Gateway{Picker: extprocv3.NewExternalProcessorClient(conn), ChunkSize: 512})
	t.Cleanup(gw.Close)

	// A prefix of 8 blocks cached on sim-1 and another on sim-2, each by a
	// request sent to the emulator itself: the picker learns of them only
	// from the engines' KV events (sim-1's positional, sim-2's named).
	prefixA, prefixB := tokens(1000, 8*blockSize), tokens(5000, 8*blockSize)
	complete(t, "http://127.0.0.1:"+strconv.Itoa(pods[1].simPort), append(prefixA, tokens(9000, 5)...))
	complete(t, "http://127.0.0.1:"+strconv.Itoa(pods[2].simPort), append(prefixB, tokens(9100, 5)...))
	defer func() {
		if t.Failed() {
			t.Logf("router metrics:\n%s", kvMetrics(t, srv))
		}
	}()
	eventually(t, "the KV index to hold both prefixes", func() bool {
		return metric(t, srv, "switchyard_dynamo_kv_index_ownerships") >= 16
	})
	require.Positive(t, metric(t, srv, `switchyard_dynamo_kv_listener_total{result="delivered"}`))
	require.Positive(t, metric(t, srv, `switchyard_dynamo_kv_events_total{result="applied"}`))
	require.Zero(t, metric(t, srv, `switchyard_dynamo_kv_listener_total{result="unknown_pod"}`))

	served := func() [3]int64 { return [3]int64{pods[0].served.Load(), pods[1].served.Load(), pods[2].served.Load()} }
	before := served()
	for i := range 4 {
		complete(t, gw.URL, append(prefixA, tokens(20000+100*i, 7)...))
	}
	require.Equal(t, [3]int64{before[0], before[1] + 4, before[2]}, served(), "prefix A lands on sim-1, which holds it")
	for i := range 3 {
		complete(t, gw.URL, append(prefixB, tokens(30000+100*i, 7)...))
	}
	require.Equal(t, [3]int64{before[0], before[1] + 4, before[2] + 3}, served(), "prefix B lands on sim-2, which holds it")
	require.GreaterOrEqual(t, metric(t, srv, `switchyard_dynamo_kv_selection_total{result="overlap"}`), 7.0)

	// A chat request is rendered and tokenized with the pool's tokenizer
	// (the emulator's own stand-in tokenizer is not a tokenizer.json, so
	// its blocks and these ids share nothing; the prompt is still hashed).
	eventually(t, "the pool's tokenizer to load", func() bool {
		chat(t, gw.URL)
		return metric(t, srv, `switchyard_dynamo_kv_prompts_total{result="ok"}`) > 7
	})

	// sim-1 becomes unready: prefix A no longer goes there.
	setReady(t, cs, ns, "sim-1", false)
	eventually(t, "the unready Pod to leave", func() bool { return len(srv.Discovery().Snapshot().Workers) == 2 })
	mid := served()
	for i := range 3 {
		complete(t, gw.URL, append(prefixA, tokens(40000+100*i, 7)...))
	}
	after := served()
	require.Equal(t, mid[1], after[1], "the unready Pod is not picked")
	require.Equal(t, int64(3), after[0]+after[2]-mid[0]-mid[2])
}

// tokens is n consecutive token ids from first.
func tokens(first, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = first + i
	}
	return out
}

// complete sends a completions request whose prompt is token ids, as the
// engine and the picker both take them.
func complete(t *testing.T, base string, prompt []int) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"model": simModel, "prompt": prompt, "max_tokens": 1})
	require.NoError(t, err)
	post(t, base+"/v1/completions", body)
}

func chat(t *testing.T, base string) {
	t.Helper()
	post(t, base+"/v1/chat/completions",
		[]byte(`{"model":"`+simModel+`","max_tokens":1,"messages":[{"role":"user","content":"Route this request by its prefix."}]}`))
}

func post(t *testing.T, url string, body []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", url, out)
}

// startForwarders binds one HTTP forwarder per Pod at <pod IP>:<port>, the
// same port for all (the pool's target port), each relaying to its Pod's
// emulator once it has one and counting what it serves. The emulators
// listen on every interface, so they cannot share the Pods' port.
func startForwarders(t *testing.T, pods []*pod) int {
	t.Helper()
	port := 0
	lns := make([]net.Listener, len(pods))
	for i, p := range pods {
		ln, err := net.Listen("tcp", net.JoinHostPort(p.ip, strconv.Itoa(port)))
		require.NoError(t, err)
		port = ln.Addr().(*net.TCPAddr).Port
		lns[i] = ln
		t.Cleanup(func() { ln.Close() })
	}
	// Chosen while the forwarders hold their port, so no emulator is
	// given it.
	simPorts := freePorts(t, len(pods))
	for i, p := range pods {
		ln := lns[i]
		p.simPort = simPorts[i]
		target, _ := url.Parse("http://127.0.0.1:" + strconv.Itoa(p.simPort))
		proxy := httputil.NewSingleHostReverseProxy(target)
		hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.served.Add(1)
			proxy.ServeHTTP(w, r)
		}), ReadHeaderTimeout: 10 * time.Second}
		go hs.Serve(ln)
		t.Cleanup(func() { hs.Close() })
	}
	return port
}

// freePorts returns n distinct ports free on every IPv4 address, as the
// emulators bind theirs: a port free on 127.0.0.1 may still be taken on
// another loopback address (a forwarder's). Every probe listener stays
// open until all are chosen: a port closed at once may be handed out
// again by the next probe, and two emulators would then race for it.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp4", ":0")
		require.NoError(t, err)
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// startSim runs one llm-d-inference-sim for p: its simulated tokenizer
// (no model download), KV cache on with the picker's block size, events
// published by dialling the picker's listener under POD_IP's topic.
func startSim(t *testing.T, bin string, p *pod, listener string) {
	t.Helper()
	cmd := exec.Command(bin, "--port", strconv.Itoa(p.simPort), "--model", simModel, "--force-dummy-tokenizer",
		"--enable-kvcache", "--block-size", strconv.Itoa(blockSize), "--kv-cache-size", "2048", "--mode", "echo",
		"--zmq-endpoint", "tcp://"+listener)
	if p.namedEvents {
		cmd.Args = append(cmd.Args, "--use-vllm-map-event-format")
	}
	cmd.Env = append(os.Environ(), "POD_IP="+p.ip)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s's emulator:\n%s", p.name, lastBytes(logs.Bytes(), 4096))
		}
	})
	eventually(t, p.name+"'s emulator to serve", func() bool {
		select {
		case <-exited:
			t.Fatalf("%s's emulator exited:\n%s", p.name, lastBytes(logs.Bytes(), 4096))
		default:
		}
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(p.simPort) + "/v1/models")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// startPicker runs `switchyard epp` in standalone mode over the pool, the
// KV event listener on a free loopback port, the project's test tokenizer
// and chat template named (and so pinned) by the pool's settings.
func startPicker(t *testing.T, ns string) *server.Server {
	t.Helper()
	c := config.Default()
	c.Server.BindAddress = "127.0.0.1:0"
	c.Dynamo.Enabled, c.Dynamo.KV.Enabled = true, true
	d := &c.Dynamo.Discovery
	d.Source = config.SourceInferencePool
	d.Kubernetes.WatchReconnectBackoff = config.Backoff{Initial: config.Duration(50 * time.Millisecond), Max: config.Duration(time.Second)}
	d.InferencePool.Name, d.InferencePool.Namespace, d.InferencePool.KVEventsListen = "sims", ns, "127.0.0.1:0"
	d.InferencePool.Tokenizer = testArtifact(t, fixtures.TokenizerJSON)
	d.InferencePool.ChatTemplate = testArtifact(t, fixtures.TokenizerConfig)
	c.EPP.Enabled, c.EPP.Mode, c.EPP.Listen, c.EPP.Plaintext = true, config.EPPModeStandalone, "127.0.0.1:0", true
	c.EPP.ModelName, c.EPP.KVCacheBlockSize = simModel, blockSize
	srv, err := server.New(c, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	require.NotEmpty(t, srv.KVListenerAddr())
	return srv
}

// testArtifact writes one file of the project's test tokenizer and names
// it with its checksum.
func testArtifact(t *testing.T, name string) config.PoolArtifact {
	t.Helper()
	data, err := fixtures.TokenizerFile(fixtures.TestTokenizer, name)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return config.PoolArtifact{Path: path, Checksum: string(artifacts.Sum(data))}
}

func poolObject(ns, name string, port int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": map[string]any{"app": "sim"}},
			"targetPorts":       []any{map[string]any{"number": int64(port)}},
			"endpointPickerRef": map[string]any{"name": "switchyard-epp", "port": map[string]any{"number": int64(9002)}},
		},
	}}
}

// createReadyPod creates p's Pod and reports it Running, Ready, at its IP
// (envtest runs no kubelet, so the test writes the status).
func createReadyPod(t *testing.T, cs *kubernetes.Clientset, ns string, p *pod) {
	t.Helper()
	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: ns, Labels: map[string]string{"app": "sim"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "llm-d-inference-sim:" + simVersion}}},
	}
	created, err := cs.CoreV1().Pods(ns).Create(context.Background(), obj, metav1.CreateOptions{})
	require.NoError(t, err)
	created.Status.PodIP = p.ip
	writeReady(t, cs, created, true)
}

func setReady(t *testing.T, cs *kubernetes.Clientset, ns, name string, ready bool) {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	writeReady(t, cs, p, ready)
}

func writeReady(t *testing.T, cs *kubernetes.Clientset, p *corev1.Pod, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	_, err := cs.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// kvMetrics are the router's KV and picker series, for a failure's log.
func kvMetrics(t *testing.T, srv *server.Server) string {
	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Join(regexp.MustCompile(`(?m)^switchyard_(dynamo_kv|epp)\S* [1-9].*$`).FindAllString(string(b), -1), "\n")
}

// metric reads one series from the router's /metrics.
func metric(t *testing.T, srv *server.Server, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	require.NotNil(t, m, "no series %s", series)
	v, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return v
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
