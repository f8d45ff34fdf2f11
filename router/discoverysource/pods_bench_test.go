package discoverysource

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"switchyard/internal/kubetest"
	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/metrics"
)

// benchPodsEnv sets how many workers the Kubernetes discovery benchmarks
// create (Pods, or DynamoWorkerMetadata objects); the documented runs use
// the sources' ceiling, 16,384.
const benchPodsEnv = "SWITCHYARD_BENCH_K8S_PODS"

const (
	defaultBenchPods = 16384
	changesPerKind   = 50
	createWorkers    = 16
	benchWait        = 10 * time.Minute
)

func benchPodCount(b *testing.B) int {
	s := os.Getenv(benchPodsEnv)
	if s == "" {
		return defaultBenchPods
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", benchPodsEnv, s)
	}
	return n
}

// BenchmarkPodDiscovery measures the Pod source on a real API server at
// fleet size: the time from a single Pod change's API call returning to
// the registry's generation moving, and the heap the source and the
// routing core hold for the whole fleet. It runs once whatever b.N is;
// run it with -benchtime 1x.
func BenchmarkPodDiscovery(b *testing.B) {
	if testing.Short() {
		b.Skip("creates thousands of Pods on a real API server")
	}
	n := benchPodCount(b)
	b.Setenv("KUBECONFIG", kubetest.Kubeconfig(b))
	ns := kubetest.Namespace(b)
	cs := unthrottledClient(b)

	start := time.Now()
	createReadyPods(b, cs, ns, n)
	b.Logf("created %d ready Pods in %v", n, time.Since(start).Round(time.Millisecond))

	before := heapAfterGC()
	start = time.Now()
	m := metrics.New()
	target := newTarget(b, nil)
	s := New(target, clock.Real{}, slog.New(slog.DiscardHandler), &m.Discovery, nil)
	b.Cleanup(s.Stop)
	cfg := podsConfig(ns)
	cfg.Dynamo.Discovery.Kubernetes.Model = "solar-pro4"
	s.Apply(cfg)
	reg := target.Registry()
	waitBench(b, "the whole fleet", func() bool { return len(reg.Snapshot().Workers) == n && s.Connected() })
	b.Logf("first list: %d workers in the registry after %v", n, time.Since(start).Round(time.Millisecond))
	held := heapAfterGC() - before

	b.ResetTimer()
	notReady := measureChanges(b, reg, changesPerKind, func(i int) (func(), func()) {
		name := benchPodName(i)
		return readyWrite(b, cs, ns, name, false), func() { readyWrite(b, cs, ns, name, true)() }
	})
	relabel := measureChanges(b, reg, changesPerKind, func(i int) (func(), func()) {
		return relabelWrite(b, cs, ns, benchPodName(i), fmt.Sprintf("VllmWorker-relabelled-%d", i)), nil
	})
	deleted := measureChanges(b, reg, changesPerKind, func(i int) (func(), func()) {
		name := benchPodName(i)
		return func() { deletePod(b, cs, ns, name) }, func() { createReadyPod(b, cs, ns, name) }
	})
	b.StopTimer()

	b.ReportMetric(float64(held)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(held)/float64(n), "heap-B/pod")
	report(b, "notready", notReady)
	report(b, "label", relabel)
	report(b, "delete", deleted)
}

// delays are one kind of change's delays to the registry's new generation,
// measured from the write's API call returning (what the issue asks;
// zero when the watch event outruns the response) and from its start.
type delays struct{ fromReturn, fromStart []time.Duration }

// measureChanges makes count single-worker changes, each on its own
// worker. prepare returns the change's one write (any read it needs is done
// before, outside the measurement) and an optional restore, run and waited
// for outside the measurement so the fleet stays at its size.
func measureChanges(b *testing.B, reg *discovery.Registry, count int, prepare func(i int) (write, restore func())) delays {
	b.Helper()
	var out delays
	for i := range count {
		write, restore := prepare(i)
		gen := reg.Generation()
		moved := watchGeneration(reg)
		issued := time.Now()
		write()
		returned := time.Now()
		var at time.Time
		select {
		case at = <-moved:
		case <-time.After(benchWait):
			b.Fatalf("change %d: the registry generation did not move", i)
		}
		if reg.Generation() <= gen {
			b.Fatalf("change %d: generation %d did not move past %d", i, reg.Generation(), gen)
		}
		out.fromReturn = append(out.fromReturn, max(0, at.Sub(returned)))
		out.fromStart = append(out.fromStart, at.Sub(issued))
		if restore != nil {
			settle(b, reg, restore)
		}
	}
	return out
}

// watchGeneration reports when the registry's next generation is published.
func watchGeneration(reg *discovery.Registry) <-chan time.Time {
	ch := reg.Changed()
	at := make(chan time.Time, 1)
	go func() {
		<-ch
		at <- time.Now()
	}()
	return at
}

// settle runs restore and waits until the registry has published it.
func settle(b *testing.B, reg *discovery.Registry, restore func()) {
	moved := watchGeneration(reg)
	restore()
	select {
	case <-moved:
	case <-time.After(benchWait):
		b.Fatal("the restore did not reach the registry")
	}
}

func report(b *testing.B, kind string, d delays) {
	slices.Sort(d.fromReturn)
	slices.Sort(d.fromStart)
	b.ReportMetric(ms(percentile(d.fromReturn, 50)), kind+"-p50-ms")
	b.ReportMetric(ms(percentile(d.fromReturn, 99)), kind+"-p99-ms")
	b.ReportMetric(ms(percentile(d.fromStart, 50)), kind+"-call-p50-ms")
	b.ReportMetric(ms(percentile(d.fromStart, 99)), kind+"-call-p99-ms")
}

func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, i-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func heapAfterGC() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func waitBench(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(benchWait)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// unthrottledClient is an admin client without client-go's default
// 5 requests/s limit, so creating the fleet is bound by the server.
func unthrottledClient(b *testing.B) *kubernetes.Clientset {
	cfg := kubetest.Config(b)
	cfg.QPS = -1
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

func benchPodName(i int) string { return fmt.Sprintf("decode-%05d", i) }

// createReadyPods creates n ready worker Pods through a bounded pool of
// concurrent clients.
func createReadyPods(b *testing.B, cs *kubernetes.Clientset, ns string, n int) {
	inParallel(b, n, func(i int) { createReadyPod(b, cs, ns, benchPodName(i)) })
}

// inParallel runs create(0..n-1) on createWorkers goroutines, so creating
// a fleet is bound by the API server rather than by one client's round
// trips. create reports failures with Error; inParallel stops the
// benchmark after the pool drains if any did.
func inParallel(b *testing.B, n int, create func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range createWorkers {
		wg.Go(func() {
			for i := range next {
				create(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

func benchCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// createReadyPod creates a decode worker Pod and gives it the status a
// kubelet reports for a running, ready Pod. It may run on a pool goroutine,
// so it reports failures with Error rather than Fatal.
func createReadyPod(b *testing.B, cs *kubernetes.Clientset, ns, name string) {
	ctx, cancel := benchCtx()
	defer cancel()
	p, err := cs.CoreV1().Pods(ns).Create(ctx, benchPod(name), metav1.CreateOptions{})
	if err != nil {
		b.Errorf("create %s: %v", name, err)
		return
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		b.Errorf("mark %s ready: %v", name, err)
	}
}

func benchPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"nvidia.com/dynamo-discovery-backend":  "kubernetes",
			"nvidia.com/dynamo-discovery-enabled":  "true",
			"nvidia.com/dynamo-namespace":          "graph",
			"nvidia.com/dynamo-component-type":     "worker",
			"nvidia.com/dynamo-sub-component-type": "decode",
			"nvidia.com/dynamo-component":          "VllmDecodeWorker",
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "worker:latest"}}},
	}
}

// readyWrite reads the Pod and returns the status write that sets its
// Ready condition.
func readyWrite(b *testing.B, cs *kubernetes.Clientset, ns, name string, ready bool) func() {
	p := getPod(b, cs, ns, name)
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	return func() {
		ctx, cancel := benchCtx()
		defer cancel()
		if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// relabelWrite reads the Pod and returns the write that moves it to another
// component, which changes its records' keys and so the worker.
func relabelWrite(b *testing.B, cs *kubernetes.Clientset, ns, name, component string) func() {
	p := getPod(b, cs, ns, name)
	p.Labels["nvidia.com/dynamo-component"] = component
	return func() {
		ctx, cancel := benchCtx()
		defer cancel()
		if _, err := cs.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func getPod(b *testing.B, cs *kubernetes.Clientset, ns, name string) *corev1.Pod {
	ctx, cancel := benchCtx()
	defer cancel()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func deletePod(b *testing.B, cs *kubernetes.Clientset, ns, name string) {
	ctx, cancel := benchCtx()
	defer cancel()
	grace := int64(0)
	if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		b.Fatal(err)
	}
}
