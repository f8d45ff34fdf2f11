package discoverysource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"switchyard/internal/kubetest"
	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource/k8ssource"
	"switchyard/router/metrics"
)

// endpointsPerSlice is how many endpoints the EndpointSlice controller puts
// in one slice at most; the benchmark's fleet is cut the same way.
const endpointsPerSlice = 100

var dwmGVR = schema.GroupVersionResource{Group: "nvidia.com", Version: "v1alpha1", Resource: "dynamoworkermetadatas"}

// benchMetaFleet is the fleet BenchmarkMetadataDiscovery writes to the API
// server. It is made once per process: the testing package runs a
// benchmark's body with b.N = 1 before the measured run, and creating
// 16,384 objects twice would double the setup for nothing.
type benchMetaFleet struct {
	n   int
	ns  string
	cs  *kubernetes.Clientset
	dyn dynamic.ResourceInterface
	// serial makes every card edit a new value across runs.
	serial int
}

var benchMeta struct {
	sync.Mutex
	fleet *benchMetaFleet
}

// BenchmarkMetadataDiscovery measures the metadata source (source
// kubernetes) on a real API server at fleet size: the time from starting
// the source to the registry holding every worker, the heap the source
// and the routing core hold for the whole fleet, and the time from one
// change's API call to the registry's generation moving, over b.N changes
// of each kind: a DynamoWorkerMetadata card edit, and an EndpointSlice
// update marking one of its 100 endpoints not ready.
func BenchmarkMetadataDiscovery(b *testing.B) {
	if testing.Short() {
		b.Skip("creates thousands of objects on a real API server")
	}
	f := metadataFleet(b, benchPodCount(b))
	b.Setenv("KUBECONFIG", kubetest.Kubeconfig(b))
	listed := f.timeLists(b)

	before := heapAfterGC()
	start := time.Now()
	m := metrics.New()
	target := newTarget(b, nil)
	s := New(target, clock.Real{}, slog.New(slog.DiscardHandler), &m.Discovery, nil)
	// Stopped by defer, not b.Cleanup: the testing package keeps a run's
	// cleanup functions in a slice it only reslices, so the b.N = 1 run's
	// supervisor, and its whole fleet, would still be reachable when the
	// measured run takes its "before" heap.
	defer s.Stop()
	cfg := podsConfig(f.ns)
	cfg.Dynamo.Discovery.Source = config.SourceKubernetes
	s.Apply(cfg)
	reg := target.Registry()
	waitBench(b, "the whole fleet", func() bool { return len(reg.Snapshot().Workers) == f.n && s.Connected() })
	synced := time.Since(start)
	held := heapAfterGC() - before
	writeHeapProfile(b)
	failed := testutil.ToFloat64(m.Discovery.Events.WithLabelValues(k8ssource.KindConnectFailed)) +
		testutil.ToFloat64(m.Discovery.Events.WithLabelValues(k8ssource.KindWatchEnded))

	b.ResetTimer()
	cardEdit := measureChanges(b, reg, b.N, func(i int) (func(), func()) {
		return f.cardEdit(b, i%f.n), nil
	})
	notReady := measureChanges(b, reg, b.N, func(i int) (func(), func()) {
		return f.readyFlip(b, i%f.n)
	})
	b.StopTimer()

	b.ReportMetric(ms(synced), "sync-ms")
	b.ReportMetric(ms(listed), "list-ms")
	b.ReportMetric(failed, "failed-passes")
	b.ReportMetric(float64(held)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(held)/float64(f.n), "heap-B/worker")
	b.ReportMetric(float64(workerRecordBytes(b, 0)), "records-B/worker")
	report(b, "card", cardEdit)
	report(b, "notready", notReady)
}

// benchHeapProfileEnv names a file BenchmarkMetadataDiscovery writes a
// heap profile to once the fleet is held, to see where its bytes are
// (go tool pprof -sample_index=inuse_space).
const benchHeapProfileEnv = "SWITCHYARD_BENCH_HEAP_PROFILE"

func writeHeapProfile(b *testing.B) {
	path := os.Getenv(benchHeapProfileEnv)
	if path == "" {
		return
	}
	out, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	if err := pprof.WriteHeapProfile(out); err != nil {
		b.Fatal(err)
	}
}

// metadataFleet returns the process's benchmark fleet, creating it on
// first use: n DynamoWorkerMetadata objects and the EndpointSlices marking
// every one ready, in a namespace of its own that lives as long as the
// API server.
func metadataFleet(b *testing.B, n int) *benchMetaFleet {
	benchMeta.Lock()
	defer benchMeta.Unlock()
	if f := benchMeta.fleet; f != nil {
		if f.n != n {
			b.Fatalf("the fleet has %d workers, not %d", f.n, n)
		}
		return f
	}
	kubetest.InstallCRDs(b, "../../deploy/kubernetes/crds")
	cs := unthrottledClient(b)
	ns := "bench-metadata"
	ctx, cancel := benchCtx()
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	rc := kubetest.Config(b)
	rc.QPS = -1
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	f := &benchMetaFleet{n: n, ns: ns, cs: cs, dyn: dyn.Resource(dwmGVR).Namespace(ns)}

	start := time.Now()
	inParallel(b, n, func(i int) { f.createWorker(b, i) })
	slices := (n + endpointsPerSlice - 1) / endpointsPerSlice
	inParallel(b, slices, func(k int) { f.createSlice(b, k) })
	b.Logf("created %d DynamoWorkerMetadata objects (%d B of records each) and %d EndpointSlices in %v",
		n, workerRecordBytes(b, 0), slices, time.Since(start).Round(time.Millisecond))
	benchMeta.fleet = f
	return f
}

// createWorker creates worker i's DynamoWorkerMetadata. It runs on a pool
// goroutine, so it reports failures with Error rather than Fatal.
func (f *benchMetaFleet) createWorker(b *testing.B, i int) {
	name := benchPodName(i)
	ctx, cancel := benchCtx()
	defer cancel()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoWorkerMetadata",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"data": benchWorkerData(i, 12000)},
	}}
	if _, err := f.dyn.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		b.Errorf("create %s: %v", name, err)
	}
}

// createSlice creates the k-th EndpointSlice, marking workers
// [k*100, k*100+100) ready.
func (f *benchMetaFleet) createSlice(b *testing.B, k int) {
	ready := true
	var eps []discoveryv1.Endpoint
	for i := k * endpointsPerSlice; i < min(f.n, (k+1)*endpointsPerSlice); i++ {
		eps = append(eps, discoveryv1.Endpoint{
			Addresses:  []string{benchPodIP(i)},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: benchPodName(i), Namespace: f.ns},
		})
	}
	ctx, cancel := benchCtx()
	defer cancel()
	_, err := f.cs.DiscoveryV1().EndpointSlices(f.ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("decode-%03d", k), Labels: map[string]string{
			"kubernetes.io/service-name":          "decode",
			"nvidia.com/dynamo-discovery-backend": "kubernetes",
			"nvidia.com/dynamo-discovery-enabled": "true",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
	}, metav1.CreateOptions{})
	if err != nil {
		b.Errorf("create slice %d: %v", k, err)
	}
}

// timeLists lists both resources as the source's first pass does (pages
// of 32 objects and of 500 slices) and returns how long that took: the
// API server's share of the initial sync.
func (f *benchMetaFleet) timeLists(b *testing.B) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), benchWait)
	defer cancel()
	start := time.Now()
	objects, slices := 0, 0
	opts := metav1.ListOptions{Limit: 32}
	for {
		page, err := f.dyn.List(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		objects += len(page.Items)
		if opts.Continue = page.GetContinue(); opts.Continue == "" {
			break
		}
	}
	opts = metav1.ListOptions{Limit: 500, LabelSelector: "nvidia.com/dynamo-discovery-backend=kubernetes,nvidia.com/dynamo-discovery-enabled=true"}
	for {
		page, err := f.cs.DiscoveryV1().EndpointSlices(f.ns).List(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		slices += len(page.Items)
		if opts.Continue = page.Continue; opts.Continue == "" {
			break
		}
	}
	if objects != f.n {
		b.Fatalf("listed %d objects, want %d", objects, f.n)
	}
	b.Logf("listed %d objects and %d slices in %v", objects, slices, time.Since(start).Round(time.Millisecond))
	return time.Since(start)
}

// cardEdit reads worker i's object and returns the write that edits its
// card's total_kv_blocks, which changes the worker's capacity.
func (f *benchMetaFleet) cardEdit(b *testing.B, i int) func() {
	ctx, cancel := benchCtx()
	defer cancel()
	u, err := f.dyn.Get(ctx, benchPodName(i), metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	f.serial++
	u.Object["spec"] = map[string]any{"data": benchWorkerData(i, 20000+f.serial)}
	return func() {
		ctx, cancel := benchCtx()
		defer cancel()
		if _, err := f.dyn.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// readyFlip reads the EndpointSlice holding worker i and returns the write
// marking that one endpoint not ready, and the restore marking it ready
// again.
func (f *benchMetaFleet) readyFlip(b *testing.B, i int) (write, restore func()) {
	ctx, cancel := benchCtx()
	defer cancel()
	slices := f.cs.DiscoveryV1().EndpointSlices(f.ns)
	s, err := slices.Get(ctx, fmt.Sprintf("decode-%03d", i/endpointsPerSlice), metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	set := func(ready bool) {
		ctx, cancel := benchCtx()
		defer cancel()
		s.Endpoints[i%endpointsPerSlice].Conditions.Ready = &ready
		updated, err := slices.Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		s = updated
	}
	return func() { set(false) }, func() { set(true) }
}

func benchPodIP(i int) string { return fmt.Sprintf("10.%d.%d.%d", 1+i>>16, i>>8&0xff, i&0xff) }

// benchWorkerData is the spec.data a dynamo.vllm decode worker Pod
// publishes: its generate endpoint, its model card (a few KB, most of it
// the checked files' paths and checksums) and its two event channels,
// KV events and load metrics, in the scoped layout.
func benchWorkerData(i, totalKVBlocks int) map[string]any {
	id := k8ssource.HashPodName(benchPodName(i))
	key := fmt.Sprintf("graph/decode/generate/%x", id)
	ip := benchPodIP(i)
	base := func(kind string) map[string]any {
		return map[string]any{"type": kind, "namespace": "graph", "component": "decode", "endpoint": "generate", "instance_id": int64(id)}
	}
	endpoint := base("Endpoint")
	endpoint["transport"] = map[string]any{"tcp": ip + ":31000/graph/decode/generate"}
	model := base("Model")
	model["card_json"] = benchCard(totalKVBlocks)
	channels := map[string]any{}
	for port, topic := range map[int]string{5557: discovery.TopicKVEvents, 5558: discovery.TopicLoad} {
		k := fmt.Sprintf("namespace/graph/component/decode/endpoint/generate/topic/%s/%x", discovery.EncodeSegment(topic), id)
		channels[k] = map[string]any{
			"type":  "EventChannel",
			"scope": map[string]any{"kind": "endpoint", "endpoint": map[string]any{"namespace": "graph", "component": "decode", "name": "generate"}},
			"topic": topic, "instance_id": int64(id),
			"transport": map[string]any{"kind": "Zmq", "config": map[string]any{"endpoint": fmt.Sprintf("tcp://%s:%d", ip, port)}},
		}
	}
	return map[string]any{
		"endpoints":      map[string]any{key: endpoint},
		"model_cards":    map[string]any{key: model},
		"event_channels": channels,
	}
}

// benchCard is a decode worker's card for a Hugging Face model, with the
// fields and runtime_config a vLLM worker fills in.
func benchCard(totalKVBlocks int) map[string]any {
	return map[string]any{
		"display_name": "Qwen/Qwen3-32B", "slug": "qwen_qwen3-32b", "source_path": "Qwen/Qwen3-32B",
		"model_info":                       map[string]any{"hf_config_json": checkedFile("config.json", 728)},
		"tokenizer":                        map[string]any{"hf_tokenizer_json": checkedFile("tokenizer.json", 11422654)},
		"prompt_formatter":                 map[string]any{"hf_tokenizer_config_json": checkedFile("tokenizer_config.json", 9732)},
		"gen_config":                       map[string]any{"hf_generation_config_json": checkedFile("generation_config.json", 239)},
		"architectural_max_context_length": 40960,
		"kv_cache_block_size":              16, "migration_limit": 3,
		"model_type": "Chat | Completions", "model_input": "Tokens", "worker_type": "decode",
		"needs": []any{},
		"runtime_config": map[string]any{
			"total_kv_blocks": totalKVBlocks, "max_num_seqs": 256, "max_num_batched_tokens": 8192, "context_length": 40960,
			"tool_call_parser": "hermes", "reasoning_parser": "qwen3", "exclude_tools_when_tool_choice_none": true,
			"structural_tag_mode": "off", "structural_tag_scope": "auto", "structural_tag_schema": "auto",
			"data_parallel_start_rank": 0, "data_parallel_size": 1, "enable_local_indexer": true, "enable_eagle": false,
			"runtime_data": map[string]any{"native_offloading_capacity": map[string]any{"total_tokens": 0}},
		},
		"extra_files": []any{
			checkedFile("vocab.json", 2776833), checkedFile("merges.txt", 1671853),
			checkedFile("special_tokens_map.json", 613), checkedFile("added_tokens.json", 707),
		},
	}
}

// checkedFile is a card's reference to a file of the model's snapshot.
func checkedFile(name string, size int) map[string]any {
	sum := sha256.Sum256([]byte(name))
	return map[string]any{
		"path":     "/models/hub/models--Qwen--Qwen3-32B/snapshots/9216db5781bf21249d130ec9da846c4624c16137/" + name,
		"checksum": "blake3:" + hex.EncodeToString(sum[:]),
		"size":     size,
	}
}

// workerRecordBytes is the key and value bytes of worker i's records, as
// the source holds them.
func workerRecordBytes(b *testing.B, i int) int {
	roots := map[string]string{"endpoints": "v1/instances/", "model_cards": "v1/mdc/", "event_channels": "v1/event_channels/"}
	n := 0
	for field, recs := range benchWorkerData(i, 12000) {
		for k, v := range recs.(map[string]any) {
			value, err := json.Marshal(v)
			if err != nil {
				b.Fatal(err)
			}
			n += len(roots[field]) + len(k) + len(value)
		}
	}
	return n
}
