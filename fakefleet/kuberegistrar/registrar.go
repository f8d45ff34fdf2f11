package kuberegistrar

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"switchyard/fakefleet/registrar"
	"switchyard/router/discoverysource/k8ssource"
)

// Shape says which discovery source the fleet's objects are written for.
type Shape string

const (
	// ShapeMetadata writes what source kubernetes reads: the Pod, its
	// DynamoWorkerMetadata and a readiness EndpointSlice.
	ShapeMetadata Shape = "kubernetes"
	// ShapePods writes what source kubernetes_pods reads: the Pod alone.
	ShapePods Shape = "kubernetes_pods"
)

// Registrar writes fake workers into one Kubernetes namespace.
type Registrar struct {
	pods      kubernetes.Interface
	dyn       dynamic.Interface
	namespace string
	shape     Shape
	// prefix starts every Pod name; names end in a per-component sequence.
	prefix string

	mu  sync.Mutex
	seq map[string]int
}

// New makes a registrar writing to namespace through cfg. prefix (a DNS
// label, e.g. the fleet's name) starts each Pod's name.
func New(cfg *rest.Config, namespace, prefix string, shape Shape) (*Registrar, error) {
	if shape != ShapeMetadata && shape != ShapePods {
		return nil, fmt.Errorf("kubernetes discovery shape %q: want %s or %s", shape, ShapeMetadata, ShapePods)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Registrar{pods: cs, dyn: dyn, namespace: namespace, shape: shape, prefix: prefix, seq: map[string]int{}}, nil
}

// podName gives the next name for a worker of component, e.g.
// "fleet-prefill-0". Names are DNS labels: lower case, '-' for the rest.
func (r *Registrar) podName(component string) string {
	r.mu.Lock()
	n := r.seq[component]
	r.seq[component]++
	r.mu.Unlock()
	return dnsLabel(r.prefix + "-" + component + "-" + strconv.Itoa(n))
}

func dnsLabel(s string) string {
	s = strings.ToLower(s)
	return strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
			return c
		}
		return '-'
	}, s)
}

// Registration is one fake worker's objects.
type Registration struct {
	r      *Registrar
	pod    string
	podUID types.UID
	id     uint64
	log    *slog.Logger

	mu     sync.Mutex
	worker registrar.Worker
}

// Register writes a ready worker: its Pod (status Running and Ready), and
// under ShapeMetadata its DynamoWorkerMetadata and EndpointSlice. Objects
// a previous fleet left under the same name are replaced, as a restarted
// StatefulSet Pod replaces its predecessor.
func (r *Registrar) Register(ctx context.Context, w registrar.Worker, log *slog.Logger) (*Registration, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := r.podName(w.Component)
	reg := &Registration{r: r, pod: name, id: k8ssource.HashPodName(name), worker: w,
		log: log.With("pod", name)}
	reg.deleteAll(ctx) // leftovers of an earlier run
	p, err := r.pods.CoreV1().Pods(r.namespace).Create(ctx, Pod(r.namespace, name, w), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", name, err)
	}
	reg.podUID = p.UID
	if r.shape == ShapeMetadata {
		if err := reg.putMetadata(ctx, w); err != nil {
			reg.deleteAll(ctx)
			return nil, err
		}
		if _, err := r.pods.DiscoveryV1().EndpointSlices(r.namespace).Create(ctx, EndpointSlice(r.namespace, name, true), metav1.CreateOptions{}); err != nil {
			reg.deleteAll(ctx)
			return nil, fmt.Errorf("create endpointslice %s: %w", name, err)
		}
	}
	// The fleet's workers serve on this machine's loopback.
	p.Status.PodIP = "127.0.0.1"
	if err := reg.setPodReady(ctx, p, true); err != nil {
		reg.deleteAll(ctx)
		return nil, err
	}
	return reg, nil
}

// InstanceID is the worker's id: hash_pod_name of its Pod's name.
func (g *Registration) InstanceID() uint64 { return g.id }

// PodName is the worker's Pod.
func (g *Registration) PodName() string { return g.pod }

// putMetadata creates or replaces the worker's DynamoWorkerMetadata.
func (g *Registration) putMetadata(ctx context.Context, w registrar.Worker) error {
	obj, err := Metadata(g.r.namespace, g.pod, g.podUID, registrar.Records(w, g.id))
	if err != nil {
		return err
	}
	res := g.r.dyn.Resource(MetadataGVR).Namespace(g.r.namespace)
	cur, err := res.Get(ctx, g.pod, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = res.Create(ctx, obj, metav1.CreateOptions{})
	case err == nil:
		obj.SetResourceVersion(cur.GetResourceVersion())
		_, err = res.Update(ctx, obj, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write dynamoworkermetadata %s: %w", g.pod, err)
	}
	return nil
}

func (g *Registration) setPodReady(ctx context.Context, p *corev1.Pod, ready bool) error {
	SetReady(p, ready)
	if _, err := g.r.pods.CoreV1().Pods(g.r.namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update pod %s status: %w", g.pod, err)
	}
	return nil
}

// Readvertise rewrites the worker's metadata (for example after a
// publisher restart changed a channel). Pods carry no records, so under
// ShapePods it only remembers w.
func (g *Registration) Readvertise(ctx context.Context, w registrar.Worker) error {
	g.mu.Lock()
	g.worker = w
	g.mu.Unlock()
	if g.r.shape != ShapeMetadata {
		return nil
	}
	return g.putMetadata(ctx, w)
}

// PutMalformed writes a spec the metadata source cannot read over the
// worker's own: the router must keep the worker's last valid records.
// Pods have no free-form records, so under ShapePods it changes nothing.
func (g *Registration) PutMalformed(ctx context.Context) error {
	if g.r.shape != ShapeMetadata {
		return nil
	}
	res := g.r.dyn.Resource(MetadataGVR).Namespace(g.r.namespace)
	cur, err := res.Get(ctx, g.pod, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cur.Object["spec"] = map[string]any{"data": map[string]any{"endpoints": "not an object"}}
	_, err = res.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

// Kill reports the worker's Pod not ready, as the kubelet does when the
// worker process dies: the Pod condition and the EndpointSlice flip; the
// metadata stays until the Pod is deleted.
func (g *Registration) Kill() {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	if err := g.markNotReady(ctx); err != nil {
		g.log.Warn("fake worker: marking the killed worker's pod not ready failed", "error", err)
	}
}

func (g *Registration) markNotReady(ctx context.Context) error {
	if g.r.shape == ShapeMetadata {
		s, err := g.r.pods.DiscoveryV1().EndpointSlices(g.r.namespace).Get(ctx, g.pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		notReady := false
		for i := range s.Endpoints {
			s.Endpoints[i].Conditions.Ready = &notReady
		}
		if _, err := g.r.pods.DiscoveryV1().EndpointSlices(g.r.namespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	p, err := g.r.pods.CoreV1().Pods(g.r.namespace).Get(ctx, g.pod, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return g.setPodReady(ctx, p, false)
}

// Deregister deletes the worker's objects (a clean shutdown).
func (g *Registration) Deregister(ctx context.Context) error {
	return g.deleteAll(ctx)
}

// deleteAll removes the Pod and what hangs off it; already gone is fine.
// No garbage collector runs on a bare API server, so the owned objects
// are deleted explicitly.
func (g *Registration) deleteAll(ctx context.Context) error {
	zero := int64(0)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	var errs []error
	keep := func(err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if g.r.shape == ShapeMetadata {
		keep(g.r.pods.DiscoveryV1().EndpointSlices(g.r.namespace).Delete(ctx, g.pod, opts))
		keep(g.r.dyn.Resource(MetadataGVR).Namespace(g.r.namespace).Delete(ctx, g.pod, opts))
	}
	keep(g.r.pods.CoreV1().Pods(g.r.namespace).Delete(ctx, g.pod, opts))
	if len(errs) > 0 {
		return fmt.Errorf("delete worker %s: %v", g.pod, errs)
	}
	return nil
}

// requestTimeout bounds the writes of a kill, which has no caller context.
const requestTimeout = 10 * time.Second
