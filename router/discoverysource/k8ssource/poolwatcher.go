package k8ssource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	gaiev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"switchyard/router/clock"
	"switchyard/router/events"
)

// InferencePools is the resource the pool watcher reads.
var InferencePools = gaiev1.SchemeGroupVersion.WithResource("inferencepools")

// PoolWatcherConfig is what one InferencePool watcher needs.
type PoolWatcherConfig struct {
	PoolConfig
	// Namespace is the Kubernetes namespace of the pool and its Pods.
	Namespace string
	// Pool is the InferencePool's name.
	Pool string
	// BackoffInitial and BackoffMax bound the wait between passes
	// (0 = the defaults).
	BackoffInitial, BackoffMax time.Duration
	// REST, when set, is used instead of in-cluster credentials or a
	// kubeconfig (tests point it at their API server).
	REST *rest.Config
}

func (c PoolWatcherConfig) check() error {
	switch {
	case c.Namespace == "":
		return errors.New("inference pool discovery: no namespace")
	case c.Pool == "":
		return errors.New("inference pool discovery: no pool name")
	case c.DynamoNamespace == "":
		return errors.New("inference pool discovery: no dynamo namespace")
	case c.Model == "":
		return errors.New("inference pool discovery: no model name")
	}
	return nil
}

// PoolWatcher runs list-then-watch passes over one InferencePool and the
// Pods its selector selects. A change of the pool's selector or target
// port ends the pass and the next one re-selects at once; a deleted pool
// empties the fleet until it returns.
type PoolWatcher struct {
	cfg   PoolWatcherConfig
	lim   limits
	sink  Sink
	clk   clock.Clock
	log   *slog.Logger
	count func(string)
	fleet *PoolFleet
}

// NewPoolWatcher makes a watcher; nothing happens until Run. log and count
// may be nil.
func NewPoolWatcher(cfg PoolWatcherConfig, sink Sink, clk clock.Clock, log *slog.Logger, count func(string)) *PoolWatcher {
	log, count = orDiscard(log, count)
	return &PoolWatcher{cfg: cfg, lim: defaultLimits(), sink: sink, clk: clk, log: log, count: count,
		fleet: NewPoolFleet(cfg.PoolConfig, log, count)}
}

// errReselect ends a pass whose pool changed what it selects.
var errReselect = errors.New("the inference pool's selector or target port changed")

// Run performs passes until ctx ends, then returns nil. It returns an error
// at once only for a config no pass could use.
func (w *PoolWatcher) Run(ctx context.Context) error {
	if err := w.cfg.check(); err != nil {
		return err
	}
	w.fleet.max = w.lim.maxPods
	b := newBackoff(w.cfg.BackoffInitial, w.cfg.BackoffMax, w.lim.watchTimeout)
	for {
		end := w.pass(ctx)
		if ctx.Err() != nil {
			w.sink.SetConnected(false)
			return nil
		}
		if errors.Is(end.err, errReselect) {
			w.log.Info("inference pool changed; re-selecting its Pods", "pool", w.cfg.Pool)
			continue
		}
		w.count(end.kind)
		delay := b.next(end.openFor)
		if !end.routine(b.resetAfter) {
			w.sink.SetConnected(false)
			w.log.Warn("inference pool discovery pass ended", "pool", w.cfg.Pool, "namespace", w.cfg.Namespace,
				"kind", end.kind, "stage", end.stage, "error", end.err, "retry_in", delay)
		}
		if !clock.Sleep(w.clk, delay, ctx.Done()) {
			w.sink.SetConnected(false)
			return nil
		}
	}
}

// poolClients are one pass's API clients.
type poolClients struct {
	pods  kubernetes.Interface
	pools dynamic.NamespaceableResourceInterface
}

func (w *PoolWatcher) clients() (poolClients, error) {
	rc, err := clientConfig(w.cfg.REST)
	if err != nil {
		return poolClients{}, err
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return poolClients{}, err
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return poolClients{}, err
	}
	return poolClients{pods: kc, pools: dc.Resource(InferencePools)}, nil
}

// pass reads the pool, lists its Pods, publishes them, then watches both
// until a watch ends or the pool changes what it selects.
func (w *PoolWatcher) pass(ctx context.Context) passEnd {
	seedCtx, seedCancel := context.WithTimeout(ctx, w.lim.requestTimeout)
	defer seedCancel()
	c, err := w.clients()
	if err != nil {
		return passEnd{kind: KindConnectFailed, stage: "connect", err: err}
	}
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", w.cfg.Pool).String()}
	pools, err := c.pools.Namespace(w.cfg.Namespace).List(seedCtx, byName)
	if err != nil {
		return passEnd{kind: endKind(err, KindConnectFailed), stage: "get pool", err: err}
	}
	sel, err := w.selection(pools.Items)
	if err != nil {
		// No pool (or one selecting nothing routable): no workers, and the
		// next pass looks again.
		w.sink.Apply(w.fleet.Relist(nil, 0, w.clk.Now(), 0))
		return passEnd{kind: KindRefused, stage: "read pool", err: err}
	}
	podsAPI := c.pods.CoreV1().Pods(w.cfg.Namespace)
	list, err := podsAPI.List(seedCtx, metav1.ListOptions{LabelSelector: sel.Selector.String()})
	if err != nil {
		return passEnd{kind: endKind(err, KindConnectFailed), stage: "list pods", err: err}
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		pods = append(pods, &list.Items[i])
	}
	revision, _ := strconv.ParseInt(list.ResourceVersion, 10, 64)
	w.sink.Apply(w.fleet.Relist(pods, sel.Port, w.clk.Now(), revision))
	w.count(KindResync)
	w.log.Info("inference pool discovery list", "pool", w.cfg.Pool, "namespace", w.cfg.Namespace, "selector", sel.Selector.String(),
		"target_port", sel.Port, "pods", len(pods))

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	abandon := context.AfterFunc(seedCtx, stopWatch)
	secs := int64(w.lim.watchTimeout / time.Second)
	podWatch, err := podsAPI.Watch(watchCtx, metav1.ListOptions{LabelSelector: sel.Selector.String(), ResourceVersion: list.ResourceVersion,
		TimeoutSeconds: &secs, AllowWatchBookmarks: true})
	if err != nil {
		return passEnd{kind: endKind(err, KindConnectFailed), stage: "watch pods", err: err}
	}
	defer podWatch.Stop()
	byName.ResourceVersion, byName.TimeoutSeconds, byName.AllowWatchBookmarks = pools.GetResourceVersion(), &secs, true
	poolWatch, err := c.pools.Namespace(w.cfg.Namespace).Watch(watchCtx, byName)
	if !abandon() || err != nil {
		if err == nil {
			poolWatch.Stop()
			err = seedCtx.Err()
		}
		return passEnd{kind: endKind(err, KindConnectFailed), stage: "watch pool", err: err}
	}
	defer poolWatch.Stop()
	w.sink.SetConnected(true)
	openedAt := w.clk.Now()
	end := w.follow(ctx, podWatch, poolWatch, sel)
	end.openFor = w.clk.Now().Sub(openedAt)
	return end
}

// selection reads the named pool of a list (the list holds it or nothing).
func (w *PoolWatcher) selection(items []unstructured.Unstructured) (PoolSelection, error) {
	if len(items) == 0 {
		return PoolSelection{}, fmt.Errorf("inference pool %s/%s not found", w.cfg.Namespace, w.cfg.Pool)
	}
	p, err := decodePool(&items[0])
	if err != nil {
		return PoolSelection{}, err
	}
	return ReadPool(p)
}

func decodePool(u *unstructured.Unstructured) (*gaiev1.InferencePool, error) {
	var p gaiev1.InferencePool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		return nil, fmt.Errorf("inference pool %s: %w", u.GetName(), err)
	}
	return &p, nil
}

// follow folds Pod events until a watch ends, and ends the pass when the
// pool changes what it selects or is deleted.
func (w *PoolWatcher) follow(ctx context.Context, pods, pools watch.Interface, sel PoolSelection) passEnd {
	idle := w.clk.NewTimer(w.lim.idleTimeout)
	defer func() { idle.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return passEnd{}
		case <-idle.C():
			return passEnd{kind: KindWatchEnded, stage: "watch", err: fmt.Errorf("no event for %s", w.lim.idleTimeout)}
		case ev, ok := <-pods.ResultChan():
			if !ok {
				return passEnd{kind: KindWatchEnded, stage: "watch pods", err: errors.New("watch closed"), closed: true}
			}
			if end, stop := w.foldPod(ev); stop {
				return end
			}
		case ev, ok := <-pools.ResultChan():
			if !ok {
				return passEnd{kind: KindWatchEnded, stage: "watch pool", err: errors.New("watch closed"), closed: true}
			}
			if end, stop := w.foldPool(ev, sel); stop {
				return end
			}
		}
		idle.Stop()
		idle = w.clk.NewTimer(w.lim.idleTimeout)
	}
}

func (w *PoolWatcher) foldPod(ev watch.Event) (passEnd, bool) {
	var batch []events.Event
	switch ev.Type {
	case watch.Error:
		err := apierrors.FromObject(ev.Object)
		return passEnd{kind: endKind(err, KindWatchEnded), stage: "watch pods", err: err}, true
	case watch.Added, watch.Modified:
		if p, ok := ev.Object.(*corev1.Pod); ok {
			batch = w.fleet.Upsert(p, w.clk.Now())
		}
	case watch.Deleted:
		if p, ok := ev.Object.(*corev1.Pod); ok {
			batch = w.fleet.Remove(p.Name, w.clk.Now())
		}
	}
	if len(batch) > 0 {
		w.sink.Apply(batch)
	}
	return passEnd{}, false
}

// foldPool ends the pass when the pool now selects other Pods or another
// port, or is gone; other changes (its picker reference, say) are not
// the router's concern.
func (w *PoolWatcher) foldPool(ev watch.Event, sel PoolSelection) (passEnd, bool) {
	switch ev.Type {
	case watch.Error:
		err := apierrors.FromObject(ev.Object)
		return passEnd{kind: endKind(err, KindWatchEnded), stage: "watch pool", err: err}, true
	case watch.Deleted:
		return passEnd{err: errReselect}, true
	case watch.Added, watch.Modified:
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return passEnd{}, false
		}
		p, err := decodePool(u)
		if err != nil {
			return passEnd{err: errReselect}, true
		}
		next, err := ReadPool(p)
		if err != nil || !next.Same(sel) {
			return passEnd{err: errReselect}, true
		}
	}
	return passEnd{}, false
}
