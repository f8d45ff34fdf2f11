package k8ssource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typeddiscoveryv1 "k8s.io/client-go/kubernetes/typed/discovery/v1"

	"switchyard/router/clock"
	"switchyard/router/events"
)

// metaGVR is the DynamoWorkerMetadata resource.
var metaGVR = schema.GroupVersionResource{Group: metaGroup, Version: metaVersion, Resource: metaResource}

// metaLimits are the metadata source's compiled-in figures; tests shrink
// them.
type metaLimits struct {
	objectPage, slicePage int64
	maxObjects, maxBytes  int
	watchTimeout          time.Duration
	idleTimeout           time.Duration
	requestTimeout        time.Duration
}

func defaultMetaLimits() metaLimits {
	return metaLimits{
		objectPage: 32, slicePage: 500,
		maxObjects: MaxMetadataObjects, maxBytes: MaxMetadataBytes,
		watchTimeout: watchTimeout, idleTimeout: idleTimeout, requestTimeout: requestTimeout,
	}
}

// MetaWatcher runs list-then-watch passes over DynamoWorkerMetadata
// resources and the readiness EndpointSlices (dynamo.discovery.source:
// kubernetes). A configuration change replaces it.
type MetaWatcher struct {
	cfg    Config
	lim    metaLimits
	sink   Sink
	clk    clock.Clock
	log    *slog.Logger
	count  func(string)
	fleet  *MetaFleet
	passes atomic.Uint64
}

// NewMeta makes a metadata watcher; nothing happens until Run. Config's
// Model and Models are not read: each worker's model comes from its card.
// log and count may be nil.
func NewMeta(cfg Config, sink Sink, clk clock.Clock, log *slog.Logger, count func(string)) *MetaWatcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if count == nil {
		count = func(string) {}
	}
	return &MetaWatcher{cfg: cfg, lim: defaultMetaLimits(), sink: sink, clk: clk, log: log, count: count,
		fleet: NewMetaFleet(cfg.DynamoNamespaces, log, count)}
}

// Passes counts the passes started so far.
func (w *MetaWatcher) Passes() uint64 { return w.passes.Load() }

// Run performs passes until ctx ends, then returns nil. It returns an error
// at once only for a Config no pass could use.
func (w *MetaWatcher) Run(ctx context.Context) error {
	if err := w.cfg.checkNamespaces(); err != nil {
		return err
	}
	w.fleet.maxObjects, w.fleet.maxBytes = w.lim.maxObjects, w.lim.maxBytes
	b := newBackoff(w.cfg.BackoffInitial, w.cfg.BackoffMax, w.lim.watchTimeout)
	for {
		end := w.pass(ctx)
		if ctx.Err() != nil {
			w.sink.SetConnected(false)
			return nil
		}
		w.count(end.kind)
		delay := b.next(end.openFor)
		attrs := []any{"namespace", w.cfg.Namespace, "kind", end.kind, "stage", end.stage, "error", end.err,
			"open_for", end.openFor, "retry_in", delay}
		if end.routine(b.resetAfter) {
			w.log.Debug("kubernetes metadata discovery watch closed by the server; relisting", attrs...)
		} else {
			w.sink.SetConnected(false)
			w.log.Warn("kubernetes metadata discovery pass ended", attrs...)
		}
		if !clock.Sleep(w.clk, delay, ctx.Done()) {
			w.sink.SetConnected(false)
			return nil
		}
	}
}

// metaClients are one pass's clients.
type metaClients struct {
	objects dynamic.ResourceInterface
	slices  typeddiscoveryv1.EndpointSliceInterface
}

func (w *MetaWatcher) clients() (metaClients, error) {
	rc, err := clientConfig(w.cfg.REST)
	if err != nil {
		return metaClients{}, err
	}
	// 16,384 resources in pages of 32 are 512 requests: leave the shared
	// deadline to the server, not to client-side throttling.
	rc.QPS, rc.Burst = 500, 1000
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return metaClients{}, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return metaClients{}, err
	}
	return metaClients{objects: dyn.Resource(metaGVR).Namespace(w.cfg.Namespace), slices: cs.DiscoveryV1().EndpointSlices(w.cfg.Namespace)}, nil
}

// pass lists both resources, publishes the join, then watches both until
// either watch ends; the next pass relists both.
func (w *MetaWatcher) pass(ctx context.Context) passEnd {
	w.passes.Add(1)
	seedCtx, seedCancel := context.WithTimeout(ctx, w.lim.requestTimeout)
	defer seedCancel()

	c, err := w.clients()
	if err != nil {
		return passEnd{kind: KindConnectFailed, stage: "connect", err: err}
	}
	objects, objRV, err := w.listObjects(seedCtx, c.objects)
	if err != nil {
		return passEnd{kind: endKind(err, KindConnectFailed), stage: "list metadata", err: err}
	}
	slices, sliceRV, err := w.listSlices(seedCtx, c.slices)
	if err != nil {
		return passEnd{kind: endKind(err, KindConnectFailed), stage: "list endpointslices", err: err}
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	abandon := context.AfterFunc(seedCtx, stopWatch) // the shared deadline also bounds opening the watches
	secs := int64(w.lim.watchTimeout / time.Second)
	objW, err := c.objects.Watch(watchCtx, metav1.ListOptions{ResourceVersion: objRV, TimeoutSeconds: &secs, AllowWatchBookmarks: true})
	if err != nil {
		return passEnd{kind: endKind(err, KindConnectFailed), stage: "open metadata watch", err: err}
	}
	defer objW.Stop()
	sliceW, err := c.slices.Watch(watchCtx, metav1.ListOptions{LabelSelector: sliceSelector, ResourceVersion: sliceRV, TimeoutSeconds: &secs, AllowWatchBookmarks: true})
	if err != nil {
		return passEnd{kind: endKind(err, KindConnectFailed), stage: "open endpointslice watch", err: err}
	}
	defer sliceW.Stop()
	if !abandon() {
		return passEnd{kind: KindConnectFailed, stage: "open watch", err: seedCtx.Err()}
	}

	revision, _ := strconv.ParseInt(objRV, 10, 64) // opaque to clients; recorded when numeric
	w.sink.Apply(w.fleet.Relist(objects, slices, w.clk.Now(), revision))
	w.count(KindResync)
	w.log.Info("kubernetes metadata discovery list", "namespace", w.cfg.Namespace,
		"resources", len(objects), "endpointslices", len(slices), "resource_version", objRV)
	w.sink.SetConnected(true)
	openedAt := w.clk.Now()
	end := w.follow(ctx, objW, sliceW)
	end.openFor = w.clk.Now().Sub(openedAt)
	return end
}

// listObjects reads every DynamoWorkerMetadata in pages at one
// resourceVersion, keeping at most maxObjects.
func (w *MetaWatcher) listObjects(ctx context.Context, ri dynamic.ResourceInterface) ([]*unstructured.Unstructured, string, error) {
	var out []*unstructured.Unstructured
	opts := metav1.ListOptions{Limit: w.lim.objectPage}
	for {
		page, err := ri.List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		for i := range page.Items {
			if len(out) == w.lim.maxObjects {
				w.truncated("dynamoworkermetadatas")
				return out, page.GetResourceVersion(), nil
			}
			out = append(out, &page.Items[i])
		}
		if page.GetContinue() == "" {
			return out, page.GetResourceVersion(), nil
		}
		opts.Continue = page.GetContinue()
	}
}

// listSlices reads every selected EndpointSlice in pages at one
// resourceVersion, keeping at most maxObjects.
func (w *MetaWatcher) listSlices(ctx context.Context, si typeddiscoveryv1.EndpointSliceInterface) ([]*discoveryv1.EndpointSlice, string, error) {
	var out []*discoveryv1.EndpointSlice
	opts := metav1.ListOptions{LabelSelector: sliceSelector, Limit: w.lim.slicePage}
	for {
		page, err := si.List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		for i := range page.Items {
			if len(out) == w.lim.maxObjects {
				w.truncated("endpointslices")
				return out, page.ResourceVersion, nil
			}
			out = append(out, &page.Items[i])
		}
		if page.Continue == "" {
			return out, page.ResourceVersion, nil
		}
		opts.Continue = page.Continue
	}
}

func (w *MetaWatcher) truncated(resource string) {
	w.count(KindSeedTruncated)
	w.log.Warn("kubernetes metadata discovery list truncated", "namespace", w.cfg.Namespace, "resource", resource, "kept", w.lim.maxObjects)
}

// readObject takes what the fleet needs from a DynamoWorkerMetadata.
func readObject(u *unstructured.Unstructured) metaObject {
	o := metaObject{name: u.GetName(), uid: string(u.GetUID()), content: u.Object}
	for _, ref := range u.GetOwnerReferences() {
		if ref.Kind == "Pod" && ref.APIVersion == "v1" {
			o.ownerPod = ref.Name
			break
		}
	}
	return o
}

// readSlice lists the Pods an EndpointSlice marks ready: endpoints with
// conditions.ready true (unset counts as not ready) and a Pod targetRef.
// Each Pod is listed once, however many addresses it has, so a slice
// holds one readiness reference per Pod.
func readSlice(s *discoveryv1.EndpointSlice) readySlice {
	r := readySlice{name: s.Name}
	seen := map[string]bool{}
	for _, ep := range s.Endpoints {
		if ep.Conditions.Ready == nil || !*ep.Conditions.Ready || ep.TargetRef == nil || ep.TargetRef.Name == "" {
			continue
		}
		if ep.TargetRef.Kind != "" && ep.TargetRef.Kind != "Pod" {
			continue
		}
		if !seen[ep.TargetRef.Name] {
			seen[ep.TargetRef.Name] = true
			r.ready = append(r.ready, ep.TargetRef.Name)
		}
	}
	return r
}

// follow folds both watches' events until either ends. Each watch has its
// own idle deadline, so a stalled EndpointSlice watch is noticed while the
// metadata watch is busy, and the other way round.
func (w *MetaWatcher) follow(ctx context.Context, objW, sliceW watch.Interface) passEnd {
	objIdle, sliceIdle := w.clk.NewTimer(w.lim.idleTimeout), w.clk.NewTimer(w.lim.idleTimeout)
	defer func() { objIdle.Stop(); sliceIdle.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return passEnd{}
		case <-objIdle.C():
			return w.idleEnd("metadata watch")
		case <-sliceIdle.C():
			return w.idleEnd("endpointslice watch")
		case ev, ok := <-objW.ResultChan():
			if !ok {
				return passEnd{kind: KindWatchEnded, stage: "metadata watch", err: errors.New("watch closed"), closed: true}
			}
			objIdle.Stop()
			objIdle = w.clk.NewTimer(w.lim.idleTimeout)
			if end, stop := w.foldObject(ev); stop {
				return end
			}
		case ev, ok := <-sliceW.ResultChan():
			if !ok {
				return passEnd{kind: KindWatchEnded, stage: "endpointslice watch", err: errors.New("watch closed"), closed: true}
			}
			sliceIdle.Stop()
			sliceIdle = w.clk.NewTimer(w.lim.idleTimeout)
			if end, stop := w.foldSlice(ev); stop {
				return end
			}
		}
	}
}

func (w *MetaWatcher) idleEnd(stage string) passEnd {
	return passEnd{kind: KindWatchEnded, stage: stage, err: fmt.Errorf("no event for %s", w.lim.idleTimeout)}
}

func (w *MetaWatcher) foldObject(ev watch.Event) (passEnd, bool) {
	if ev.Type == watch.Error {
		err := apierrors.FromObject(ev.Object)
		return passEnd{kind: endKind(err, KindWatchEnded), stage: "metadata watch", err: err}, true
	}
	u, ok := ev.Object.(*unstructured.Unstructured)
	if !ok {
		return passEnd{}, false
	}
	switch ev.Type {
	case watch.Added, watch.Modified:
		w.apply(w.fleet.UpsertObject(u, w.clk.Now()))
	case watch.Deleted:
		w.apply(w.fleet.RemoveObject(u.GetName(), w.clk.Now()))
	}
	return passEnd{}, false
}

func (w *MetaWatcher) foldSlice(ev watch.Event) (passEnd, bool) {
	if ev.Type == watch.Error {
		err := apierrors.FromObject(ev.Object)
		return passEnd{kind: endKind(err, KindWatchEnded), stage: "endpointslice watch", err: err}, true
	}
	s, ok := ev.Object.(*discoveryv1.EndpointSlice)
	if !ok {
		return passEnd{}, false
	}
	switch ev.Type {
	case watch.Added, watch.Modified:
		w.apply(w.fleet.UpsertSlice(s, w.clk.Now()))
	case watch.Deleted:
		w.apply(w.fleet.RemoveSlice(s.Name, w.clk.Now()))
	}
	return passEnd{}, false
}

func (w *MetaWatcher) apply(batch []events.Event) {
	if len(batch) > 0 {
		w.sink.Apply(batch)
	}
}
