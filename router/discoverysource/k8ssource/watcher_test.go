package k8ssource

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"switchyard/internal/kubetest"
	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/events"
)

// These tests run the watcher against a real kube-apiserver (envtest).

// sink folds batches into a real reducer, as the supervisor does.
type sink struct {
	mu        sync.Mutex
	r         *discovery.Reducer
	counts    map[string]int
	resyncs   int
	connected bool
}

func newSink() *sink {
	s := &sink{counts: map[string]int{}}
	s.r = discovery.NewReducer(nil, s.countLocked)
	return s
}

func (s *sink) countLocked(kind string) { s.counts[kind]++ }

func (s *sink) count(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[kind]++
}

func (s *sink) Apply(batch []events.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range batch {
		if _, ok := ev.(events.DiscoveryResync); ok {
			s.resyncs++
		}
		s.r.Apply(ev)
	}
}

func (s *sink) SetConnected(c bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.connected = c
}

// workers maps Pod-derived instance ids to the workers' roles and models.
func (s *sink) workers() map[uint64]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[uint64]string{}
	for _, w := range s.r.View().Workers {
		out[w.InstanceID] = w.Role.String() + "/" + w.Model
	}
	return out
}

func (s *sink) kind(k string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[k]
}

func (s *sink) resyncCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resyncs
}

func (s *sink) isConnected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connected
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 60*time.Second, 10*time.Millisecond, "waiting for %s", what)
}

type harness struct {
	t   *testing.T
	cs  *kubernetes.Clientset
	ns  string
	w   *Watcher
	out *sink
}

// newHarness makes a namespace and a watcher over it; tune changes the
// watcher before it runs.
func newHarness(t *testing.T, clk clock.Clock, tune func(*Watcher)) *harness {
	ns := kubetest.Namespace(t)
	out := newSink()
	cfg := Config{
		Namespace: ns, DynamoNamespaces: []string{"graph"}, Model: "solar-pro4",
		BackoffInitial: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		REST: kubetest.Config(t),
	}
	w := New(cfg, out, clk, nil, out.count)
	if tune != nil {
		tune(w)
	}
	return &harness{t: t, cs: kubetest.Client(t), ns: ns, w: w, out: out}
}

// run starts the watcher; it stops when the test ends.
func (h *harness) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.w.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		require.NoError(h.t, <-done)
	})
}

func (h *harness) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	h.t.Cleanup(cancel)
	return ctx
}

// create makes a Pod and, when ready, reports it running and ready through
// the status subresource, as a kubelet would.
func (h *harness) create(p *corev1.Pod, ready bool) {
	h.t.Helper()
	p.Namespace = h.ns
	created, err := h.cs.CoreV1().Pods(h.ns).Create(h.ctx(), p, metav1.CreateOptions{})
	require.NoError(h.t, err)
	if ready {
		h.setReady(created.Name, true)
	}
}

func (h *harness) setReady(name string, ready bool) {
	h.t.Helper()
	p, err := h.cs.CoreV1().Pods(h.ns).Get(h.ctx(), name, metav1.GetOptions{})
	require.NoError(h.t, err)
	setReady(p, ready)
	_, err = h.cs.CoreV1().Pods(h.ns).UpdateStatus(h.ctx(), p, metav1.UpdateOptions{})
	require.NoError(h.t, err)
}

func (h *harness) delete(name string) {
	h.t.Helper()
	require.NoError(h.t, h.cs.CoreV1().Pods(h.ns).Delete(h.ctx(), name, metav1.DeleteOptions{}))
}

func id(name string) uint64 { return HashPodName(name) }

func TestWatcherFollowsPods(t *testing.T) {
	h := newHarness(t, clock.Real{}, nil)
	h.create(testPod("decode-0", "graph", "worker", "decode", ""), true)
	h.create(testPod("prefill-0", "graph", "prefill", "", ""), true)
	h.create(testPod("frontend-0", "graph", "frontend", "", ""), true)
	h.create(testPod("other-graph-0", "other", "worker", "decode", ""), true)
	unlabelled := testPod("plain-0", "graph", "worker", "decode", "")
	delete(unlabelled.Labels, labelEnabled)
	h.create(unlabelled, true)
	h.create(testPod("starting-0", "graph", "worker", "", ""), false)
	h.run()

	want := map[uint64]string{id("decode-0"): "decode/solar-pro4", id("prefill-0"): "prefill/solar-pro4"}
	waitFor(t, "the listed workers", func() bool { return assert.ObjectsAreEqual(want, h.out.workers()) })
	waitFor(t, "connected", h.out.isConnected)

	// Created while watching.
	h.create(testPod("decode-1", "graph", "decode", "", ""), true)
	want[id("decode-1")] = "decode/solar-pro4"
	waitFor(t, "a created worker", func() bool { return assert.ObjectsAreEqual(want, h.out.workers()) })

	// Becoming ready.
	h.setReady("starting-0", true)
	want[id("starting-0")] = "aggregated/solar-pro4"
	waitFor(t, "a worker turning ready", func() bool { return assert.ObjectsAreEqual(want, h.out.workers()) })

	// Ready to not ready, and back.
	h.setReady("decode-0", false)
	delete(want, id("decode-0"))
	waitFor(t, "a worker turning not ready", func() bool { return assert.ObjectsAreEqual(want, h.out.workers()) })
	h.setReady("decode-0", true)
	want[id("decode-0")] = "decode/solar-pro4"
	waitFor(t, "a worker ready again", func() bool { return assert.ObjectsAreEqual(want, h.out.workers()) })

	// Deleted.
	h.delete("prefill-0")
	delete(want, id("prefill-0"))
	waitFor(t, "a deleted worker", func() bool { return assert.ObjectsAreEqual(want, h.out.workers()) })
	assert.Equal(t, uint64(1), h.w.Passes(), "one list, one watch throughout")
}

// A Pod being deleted (deletionTimestamp set, held by a finalizer) stops
// being routable before it is gone.
func TestWatcherDropsTerminatingPods(t *testing.T) {
	h := newHarness(t, clock.Real{}, nil)
	p := testPod("decode-0", "graph", "decode", "", "")
	p.Finalizers = []string{"switchyard.test/hold"}
	h.create(p, true)
	h.run()
	waitFor(t, "the worker", func() bool { return len(h.out.workers()) == 1 })

	h.delete("decode-0")
	waitFor(t, "the terminating worker to leave", func() bool { return len(h.out.workers()) == 0 })

	got, err := h.cs.CoreV1().Pods(h.ns).Get(h.ctx(), "decode-0", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, got.DeletionTimestamp, "the Pod is still there, terminating")
	got.Finalizers = nil
	_, err = h.cs.CoreV1().Pods(h.ns).Update(h.ctx(), got, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// requestCounter counts list requests reaching the API server.
type requestCounter struct {
	rt    http.RoundTripper
	lists atomic.Int64
}

func (c *requestCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	q := r.URL.Query()
	if strings.HasSuffix(r.URL.Path, "/pods") && q.Get("watch") == "" && q.Get("limit") != "" {
		c.lists.Add(1)
	}
	return c.rt.RoundTrip(r)
}

func TestWatcherListsInPages(t *testing.T) {
	counter := &requestCounter{}
	h := newHarness(t, clock.Real{}, func(w *Watcher) {
		w.lim.pageSize = 2
		w.cfg.REST.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.rt = rt; return counter })
	})
	want := map[uint64]string{}
	for _, name := range []string{"w-0", "w-1", "w-2", "w-3", "w-4"} {
		h.create(testPod(name, "graph", "decode", "", ""), true)
		want[id(name)] = "decode/solar-pro4"
	}
	h.run()
	waitFor(t, "every paged worker", func() bool { return assert.ObjectsAreEqual(want, h.out.workers()) })
	assert.Equal(t, int64(3), counter.lists.Load(), "5 Pods in pages of 2")
	assert.Equal(t, 1, h.out.resyncCount(), "one resync for the one Dynamo namespace, after the last page")
}

func TestWatcherCapsHeldPods(t *testing.T) {
	h := newHarness(t, clock.Real{}, func(w *Watcher) { w.lim.maxPods, w.lim.pageSize = 2, 1 })
	for _, name := range []string{"w-0", "w-1", "w-2"} {
		h.create(testPod(name, "graph", "decode", "", ""), true)
	}
	h.run()
	waitFor(t, "the list", func() bool { return h.out.kind(KindResync) >= 1 })
	assert.Len(t, h.out.workers(), 2)
	assert.Equal(t, 1, h.out.kind(KindSeedTruncated))

	h.create(testPod("w-3", "graph", "decode", "", ""), true)
	waitFor(t, "the refusal", func() bool { return h.out.kind(KindOverCapacity) >= 1 })
	assert.Len(t, h.out.workers(), 2)
}

// The server closes every watch after timeoutSeconds; the watcher relists
// from scratch and catches what changed in between.
func TestWatcherRelistsAfterTheServerClosesTheWatch(t *testing.T) {
	h := newHarness(t, clock.Real{}, func(w *Watcher) { w.lim.watchTimeout = time.Second })
	h.create(testPod("w-0", "graph", "decode", "", ""), true)
	h.run()
	waitFor(t, "the worker", func() bool { return len(h.out.workers()) == 1 })
	waitFor(t, "a relist after the server's close", func() bool { return h.w.Passes() >= 2 && h.out.kind(KindResync) >= 2 })
	assert.GreaterOrEqual(t, h.out.kind(KindWatchEnded), 1)
	h.create(testPod("w-1", "graph", "decode", "", ""), true)
	waitFor(t, "a worker created across relists", func() bool { return len(h.out.workers()) == 2 })
}

// A watch that delivers nothing for the idle deadline is abandoned and the
// source relists, even though the connection never reported an error.
func TestWatcherIdleDeadline(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	h := newHarness(t, clk, nil)
	h.create(testPod("w-0", "graph", "decode", "", ""), true)
	h.run()
	waitFor(t, "connected", h.out.isConnected)
	require.True(t, clk.WaitForTimers(1, nil), "the idle deadline is armed")
	// The watch is quiet: nothing but the deadline can end it.
	clk.Advance(idleTimeout - time.Second)
	assert.Equal(t, uint64(1), h.w.Passes())
	clk.Advance(time.Second)
	waitFor(t, "the backoff after the idle end", func() bool { return h.out.kind(KindWatchEnded) == 1 && clk.Pending() >= 1 })
	clk.Advance(time.Second) // past the backoff
	waitFor(t, "a relist", func() bool { return h.w.Passes() == 2 && h.out.kind(KindResync) == 2 })
	assert.Len(t, h.out.workers(), 1)
}

// Two ready Pods whose names hash to one instance id are both refused;
// deleting one restores the other.
func TestWatcherRefusesDuplicateIDs(t *testing.T) {
	// Finding a real 53-bit SipHash collision takes ~10^8 names, so the
	// hash is replaced by one that maps both names to one id.
	h := newHarness(t, clock.Real{}, func(w *Watcher) {
		w.fleet.hash = func(name string) uint64 {
			if strings.HasPrefix(name, "twin-") {
				return 42
			}
			return HashPodName(name)
		}
	})
	h.create(testPod("twin-a", "graph", "decode", "", ""), true)
	h.create(testPod("solo", "graph", "decode", "", ""), true)
	h.run()
	waitFor(t, "the first twin and the solo worker", func() bool { return len(h.out.workers()) == 2 })
	h.create(testPod("twin-b", "graph", "decode", "", ""), true)
	// The reducer refuses duplicates when it builds the view.
	waitFor(t, "both twins refused", func() bool { return len(h.out.workers()) == 1 && h.out.kind("duplicate") >= 1 })
	assert.Equal(t, map[uint64]string{id("solo"): "decode/solar-pro4"}, h.out.workers())

	h.delete("twin-a")
	waitFor(t, "the surviving twin", func() bool { return len(h.out.workers()) == 2 })
	assert.Equal(t, "decode/solar-pro4", h.out.workers()[42])
}

func TestWatcherRefusesContainerMode(t *testing.T) {
	h := newHarness(t, clock.Real{}, nil)
	p := testPod("w-0", "graph", "decode", "", "")
	p.Annotations = map[string]string{annotationMode: "container"}
	h.create(p, true)
	h.create(testPod("w-1", "graph", "decode", "", ""), true)
	h.run()
	waitFor(t, "the pod-mode worker", func() bool { return len(h.out.workers()) == 1 })
	assert.Equal(t, 1, h.out.kind(KindRefused))
	assert.Contains(t, h.out.workers(), id("w-1"))
}

// Without a REST config the watcher finds its API server through
// KUBECONFIG, as it does outside a cluster.
func TestWatcherUsesKubeconfig(t *testing.T) {
	h := newHarness(t, clock.Real{}, func(w *Watcher) {
		t.Setenv("KUBECONFIG", kubetest.Kubeconfig(t))
		w.cfg.REST = nil
	})
	h.create(testPod("w-0", "graph", "decode", "", ""), true)
	h.run()
	waitFor(t, "the worker", func() bool { return len(h.out.workers()) == 1 })
}

// The source works with exactly the Role docs/kubernetes.md prescribes:
// get, list and watch on Pods, and nothing else.
func TestWatcherNeedsOnlyPodReadAccess(t *testing.T) {
	h := newHarness(t, clock.Real{}, nil)
	user := kubetest.User(t, "pod-reader-"+h.ns)
	_, err := kubernetes.NewForConfigOrDie(user).CoreV1().Pods(h.ns).List(h.ctx(), metav1.ListOptions{})
	require.True(t, apierrors.IsForbidden(err), "without the Role the user may not list Pods: %v", err)

	rbac := h.cs.RbacV1()
	_, err = rbac.Roles(h.ns).Create(h.ctx(), &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = rbac.RoleBindings(h.ns).Create(h.ctx(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "pod-reader-" + h.ns}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	h.w.cfg.REST = user
	h.create(testPod("w-0", "graph", "decode", "", ""), true)
	h.run()
	waitFor(t, "the worker, read with the least-privilege Role", func() bool { return len(h.out.workers()) == 1 })
	waitFor(t, "connected", h.out.isConnected)
}
