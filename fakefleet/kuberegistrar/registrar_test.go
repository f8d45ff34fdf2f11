package kuberegistrar

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"switchyard/fakefleet/registrar"
	"switchyard/internal/etcdtest"
	"switchyard/internal/kubetest"
	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/core"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource"
	"switchyard/router/discoverysource/k8ssource"
	"switchyard/router/metrics"
	"switchyard/router/picker"
)

func TestMain(m *testing.M) {
	code := m.Run()
	kubetest.Stop()
	os.Exit(code)
}

const crds = "../../deploy/kubernetes/crds"

// testFleet is a disaggregated fleet with an aggregated data-parallel
// worker, every worker advertising both event channels and a tokenizer.
func testFleet() []registrar.Worker {
	tok := &registrar.CheckedFile{Path: "/models/tok/tokenizer.json", Checksum: "blake3:" + fmt.Sprintf("%064x", 7), Size: 1234}
	var out []registrar.Worker
	add := func(component, role string, dp int) {
		i := len(out)
		out = append(out, registrar.Worker{Namespace: "graph", Component: component, WorkerType: role, Model: "solar-pro4",
			BlockSize: 16, TotalKVBlocks: 4096 + i, MaxNumBatchedTokens: 8192, MaxNumSeqs: 128, ContextLength: 32768, DPSize: dp,
			Transport: fmt.Sprintf("10.0.0.%d:9000/%s", i+1, component), Tokenizer: tok,
			Channels: []registrar.Channel{
				{Topic: "kv_metrics", PublisherID: uint64(1000 + i), Endpoint: fmt.Sprintf("tcp://10.0.0.%d:5557", i+1)},
				{Topic: "kv-events", PublisherID: uint64(2000 + i), Endpoint: fmt.Sprintf("tcp://10.0.0.%d:5558", i+1),
					Replay: fmt.Sprintf("tcp://10.0.0.%d:5559", i+1)},
			}})
	}
	add("prefill", "prefill", 1)
	add("prefill", "prefill", 1)
	add("decode", "decode", 1)
	add("decode", "decode", 1)
	add("backend", "aggregated", 2)
	return out
}

// follow runs the router's discovery for cfg and returns its registry.
func follow(t *testing.T, cfg *config.Config) *discovery.Registry {
	t.Helper()
	c, err := core.New(core.Options{Picker: picker.NameLoad})
	require.NoError(t, err)
	target := core.NewShared(c, clock.Real{})
	s := discoverysource.New(target, clock.Real{}, slog.New(slog.DiscardHandler), &metrics.New().Discovery, nil)
	t.Cleanup(s.Stop)
	s.Apply(cfg)
	return target.Registry()
}

func routerConfig(source, kubeNamespace, etcdEndpoint string) *config.Config {
	c := config.Default()
	c.Dynamo.Enabled = true
	c.Dynamo.Discovery.Source = source
	c.Dynamo.Discovery.Etcd.Endpoints = []string{etcdEndpoint}
	c.Dynamo.Discovery.Etcd.Namespace = "graph"
	c.Dynamo.Discovery.Kubernetes.Namespace = kubeNamespace
	c.Dynamo.Discovery.Kubernetes.DynamoNamespace = "graph"
	c.Dynamo.Discovery.Kubernetes.Model = "solar-pro4"
	return c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// comparable strips what legitimately differs between two sources'
// snapshots of one fleet: when each source saw it.
func comparable(s *discovery.Snapshot) discovery.View {
	v := discovery.View{Publishers: s.Publishers}
	for _, w := range s.Workers {
		c := *w
		c.FirstSeen, c.LastUpdated = time.Time{}, time.Time{}
		v.Workers = append(v.Workers, &c)
	}
	return v
}

// One fleet expressed as etcd records and as DynamoWorkerMetadata plus
// EndpointSlices gives identical registry snapshots: ids, roles,
// capacity, cards and event channels.
func TestEtcdAndKubernetesDiscoveryAgree(t *testing.T) {
	kubetest.InstallCRDs(t, crds)
	t.Setenv("KUBECONFIG", kubetest.Kubeconfig(t))
	ns := kubetest.Namespace(t)
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	r, err := New(kubetest.Config(t), ns, "graph", ShapeMetadata)
	require.NoError(t, err)
	fleet := testFleet()
	for _, w := range fleet {
		g, err := r.Register(ctx, w, nil)
		require.NoError(t, err)
		for key, value := range registrar.Records(w, g.InstanceID()) {
			_, err := cli.Put(ctx, key, string(value))
			require.NoError(t, err)
		}
	}

	fromEtcd := follow(t, routerConfig(config.SourceEtcd, ns, etcd.Endpoint()))
	fromKube := follow(t, routerConfig(config.SourceKubernetes, ns, etcd.Endpoint()))
	complete := func(reg *discovery.Registry) func() bool {
		return func() bool {
			s := reg.Snapshot()
			return len(s.Workers) == len(fleet) && len(s.Publishers) == 2*len(fleet)
		}
	}
	waitFor(t, "the fleet in etcd", complete(fromEtcd))
	waitFor(t, "the fleet on Kubernetes", complete(fromKube))

	want, got := comparable(fromEtcd.Snapshot()), comparable(fromKube.Snapshot())
	require.Equal(t, want, got)
	roles := map[discovery.Role]int{}
	for _, w := range got.Workers {
		roles[w.Role]++
		require.True(t, w.HasCard, "worker %x has its card", w.InstanceID)
		require.NotZero(t, w.Runtime.TotalKVBlocks, "worker %x has its capacity", w.InstanceID)
	}
	require.Equal(t, map[discovery.Role]int{discovery.RolePrefill: 2, discovery.RoleDecode: 2, discovery.RoleAggregated: 1}, roles)
	// The replay extension field survives both paths (compared above) and
	// names each kv-events publisher's replay socket.
	replays := 0
	for _, p := range got.Publishers {
		if p.Topic == discovery.TopicKVEvents {
			require.Equal(t, "Zmq", p.ReplayKind)
			require.Equal(t, strings.Replace(p.Address, ":5558", ":5559", 1), p.ReplayAddress)
			replays++
		} else {
			require.Empty(t, p.ReplayAddress)
		}
	}
	require.Equal(t, len(fleet), replays)
}

// A registered worker is discovered under hash_pod_name of its Pod; a
// killed one goes not ready and leaves the registry with its metadata
// still in place; a deregistered one leaves no object behind.
func TestMetadataShapeLifecycle(t *testing.T) {
	kubetest.InstallCRDs(t, crds)
	t.Setenv("KUBECONFIG", kubetest.Kubeconfig(t))
	ns := kubetest.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	r, err := New(kubetest.Config(t), ns, "Graph_A", ShapeMetadata)
	require.NoError(t, err)
	fleet := testFleet()
	a, err := r.Register(ctx, fleet[0], nil)
	require.NoError(t, err)
	b, err := r.Register(ctx, fleet[2], nil)
	require.NoError(t, err)
	require.Equal(t, "graph-a-prefill-0", a.PodName(), "names are DNS labels")
	require.Equal(t, k8ssource.HashPodName(a.PodName()), a.InstanceID())

	reg := follow(t, routerConfig(config.SourceKubernetes, ns, "127.0.0.1:1"))
	has := func(id uint64) bool {
		_, ok := reg.Snapshot().Worker(discovery.WorkerKey{Namespace: "graph", InstanceID: id})
		return ok
	}
	waitFor(t, "both workers", func() bool { return has(a.InstanceID()) && has(b.InstanceID()) })

	// A malformed spec keeps the worker's last valid records.
	require.NoError(t, a.PutMalformed(ctx))
	require.NoError(t, b.Readvertise(ctx, withChannels(fleet[2], fleet[2].Channels[:1])))
	waitFor(t, "b's readvertised channels", func() bool { return reg.Snapshot().CountPublishers("kv-events") == 1 })
	require.True(t, has(a.InstanceID()), "a malformed spec keeps the worker")

	a.Kill()
	waitFor(t, "the killed worker to leave", func() bool { return !has(a.InstanceID()) })
	require.True(t, has(b.InstanceID()))
	_, err = r.dyn.Resource(MetadataGVR).Namespace(ns).Get(ctx, a.PodName(), metav1.GetOptions{})
	require.NoError(t, err, "a dead worker's metadata stays until its Pod is deleted")

	require.NoError(t, b.Deregister(ctx))
	waitFor(t, "the deregistered worker to leave", func() bool { return !has(b.InstanceID()) })
	pods, err := r.pods.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1, "only the killed worker's Pod is left")
	slices, err := r.pods.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, slices.Items, 1)
}

func withChannels(w registrar.Worker, ch []registrar.Channel) registrar.Worker {
	w.Channels = ch
	return w
}

// The Pod shape writes Pods only; the Pod source finds them ready,
// with the configured model, and drops a killed one.
func TestPodShape(t *testing.T) {
	t.Setenv("KUBECONFIG", kubetest.Kubeconfig(t))
	ns := kubetest.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	r, err := New(kubetest.Config(t), ns, "graph", ShapePods)
	require.NoError(t, err)
	var regs []*Registration
	for _, w := range testFleet() {
		g, err := r.Register(ctx, w, nil)
		require.NoError(t, err)
		regs = append(regs, g)
	}
	reg := follow(t, routerConfig(config.SourceKubernetesPods, ns, "127.0.0.1:1"))
	waitFor(t, "the fleet", func() bool { return len(reg.Snapshot().Workers) == len(regs) })
	roles := map[discovery.Role]int{}
	for _, w := range reg.Snapshot().Workers {
		roles[w.Role]++
		require.Equal(t, "solar-pro4", w.Model)
		require.Equal(t, "127.0.0.1", w.Host, "the Pod's IP is the worker's host")
	}
	require.Equal(t, map[discovery.Role]int{discovery.RolePrefill: 2, discovery.RoleDecode: 2, discovery.RoleAggregated: 1}, roles)
	require.Empty(t, reg.Snapshot().Publishers, "Pods advertise no channels")

	regs[1].Kill()
	waitFor(t, "the killed worker to leave", func() bool { return len(reg.Snapshot().Workers) == len(regs)-1 })
	for _, g := range regs {
		require.NoError(t, g.Deregister(ctx))
	}
	waitFor(t, "an empty fleet", func() bool { return len(reg.Snapshot().Workers) == 0 })
}

// Invalid shapes are refused before anything is written.
func TestNewRefusesUnknownShape(t *testing.T) {
	_, err := New(&rest.Config{Host: "https://192.0.2.1"}, "default", "graph", Shape("etcd"))
	require.ErrorContains(t, err, `shape "etcd"`)
}
