package k8ssource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"switchyard/router/clock"
	"switchyard/router/events"
)

// Sink is the host side of a watcher (the discovery supervisor).
type Sink interface {
	// Apply receives a batch of events, in order, from the watcher
	// goroutine.
	Apply(batch []events.Event)
	// SetConnected reports whether the current pass is watching.
	SetConnected(bool)
}

// Watcher runs list-then-watch passes over the selected Pods. A
// configuration change replaces the Watcher.
type Watcher struct {
	cfg    Config
	lim    limits
	sink   Sink
	clk    clock.Clock
	log    *slog.Logger
	count  func(string)
	fleet  *PodFleet
	passes atomic.Uint64
}

// New makes a watcher; nothing happens until Run. log and count may be nil.
func New(cfg Config, sink Sink, clk clock.Clock, log *slog.Logger, count func(string)) *Watcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if count == nil {
		count = func(string) {}
	}
	w := &Watcher{cfg: cfg, lim: defaultLimits(), sink: sink, clk: clk, log: log, count: count}
	w.fleet = NewPodFleet(cfg, log, count)
	return w
}

// Passes counts the passes started so far.
func (w *Watcher) Passes() uint64 { return w.passes.Load() }

// Run performs passes until ctx ends, then returns nil. It returns an error
// at once only for a Config no pass could use.
func (w *Watcher) Run(ctx context.Context) error {
	if err := w.cfg.check(); err != nil {
		return err
	}
	sel, err := podSelector(w.cfg.DynamoNamespaces)
	if err != nil {
		return err
	}
	w.fleet.maxPods = w.lim.maxPods
	b := newBackoff(w.cfg.BackoffInitial, w.cfg.BackoffMax, w.lim.watchTimeout)
	for {
		end := w.pass(ctx, sel)
		if ctx.Err() != nil {
			w.sink.SetConnected(false)
			return nil
		}
		w.count(end.kind)
		delay := b.next(end.openFor)
		w.noteEnd(end, b.resetAfter, delay)
		if !clock.Sleep(w.clk, delay, ctx.Done()) {
			w.sink.SetConnected(false)
			return nil
		}
	}
}

// noteEnd reports an ended pass. A routine server-side close of a
// long-lived watch is how every healthy session ends: the relist follows at
// the floor delay, the source does not show as disconnected meanwhile, and
// it logs at DEBUG only.
func (w *Watcher) noteEnd(end passEnd, resetAfter, retryIn time.Duration) {
	attrs := []any{"namespace", w.cfg.Namespace, "kind", end.kind, "stage", end.stage, "error", end.err,
		"open_for", end.openFor, "retry_in", retryIn}
	if end.routine(resetAfter) {
		w.log.Debug("kubernetes pod discovery watch closed by the server; relisting", attrs...)
		return
	}
	w.sink.SetConnected(false)
	w.log.Warn("kubernetes pod discovery pass ended", attrs...)
}

// passEnd says why a pass ended.
type passEnd struct {
	kind, stage string
	err         error
	// openFor is how long the watch stayed open; 0 if it never opened.
	openFor time.Duration
	// closed: the server closed the watch without an error.
	closed bool
}

func (e passEnd) routine(resetAfter time.Duration) bool {
	return e.closed && e.openFor >= resetAfter
}

// pass lists, publishes the list, then watches until the watch ends.
func (w *Watcher) pass(ctx context.Context, sel string) passEnd {
	w.passes.Add(1)
	// The client build, every list page and the watch opening share one
	// deadline; the watch itself then runs until it ends.
	seedCtx, seedCancel := context.WithTimeout(ctx, w.lim.requestTimeout)
	defer seedCancel()

	client, err := w.client()
	if err != nil {
		return passEnd{kind: KindConnectFailed, stage: "connect", err: err}
	}
	pods := client.CoreV1().Pods(w.cfg.Namespace)
	list, rv, err := w.list(seedCtx, pods, sel)
	if err != nil {
		return passEnd{kind: endKind(err, KindConnectFailed), stage: "list", err: err}
	}
	revision, _ := strconv.ParseInt(rv, 10, 64) // opaque to clients; recorded when numeric
	w.sink.Apply(w.fleet.relist(list, w.cfg.DynamoNamespaces, w.clk.Now(), revision))
	w.count(KindResync)
	w.log.Info("kubernetes pod discovery list", "namespace", w.cfg.Namespace, "pods", len(list), "resource_version", rv)

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	abandon := context.AfterFunc(seedCtx, stopWatch) // the shared deadline also bounds opening the watch
	secs := int64(w.lim.watchTimeout / time.Second)
	wi, err := pods.Watch(watchCtx, metav1.ListOptions{
		LabelSelector: sel, ResourceVersion: rv, TimeoutSeconds: &secs, AllowWatchBookmarks: true,
	})
	if !abandon() || err != nil {
		if err == nil {
			wi.Stop()
			err = seedCtx.Err()
		}
		return passEnd{kind: endKind(err, KindConnectFailed), stage: "open watch", err: err}
	}
	defer wi.Stop()
	w.sink.SetConnected(true)
	openedAt := w.clk.Now()
	end := w.follow(ctx, wi)
	end.openFor = w.clk.Now().Sub(openedAt)
	return end
}

// client builds a clientset: the configured REST config, else in-cluster
// credentials, else KUBECONFIG or ~/.kube/config, never prompting.
func (w *Watcher) client() (*kubernetes.Clientset, error) {
	rc, err := clientConfig(w.cfg.REST)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// clientConfig is the REST config of a pass: the configured one, else
// in-cluster credentials, else KUBECONFIG or ~/.kube/config.
func clientConfig(rc *rest.Config) (*rest.Config, error) {
	if rc == nil {
		var err error
		if rc, err = restConfig(); err != nil {
			return nil, err
		}
	} else {
		rc = rest.CopyConfig(rc)
	}
	rc.UserAgent = "switchyard"
	// Listing 16,384 Pods takes 33 pages; client-go's default 5 requests/s
	// would spend seconds of the shared deadline waiting on itself.
	rc.QPS, rc.Burst = 50, 100
	return rc, nil
}

func restConfig() (*rest.Config, error) {
	rc, err := rest.InClusterConfig()
	if err == nil {
		return rc, nil
	}
	if !errors.Is(err, rest.ErrNotInCluster) {
		return nil, err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}

// list reads every selected Pod in pages, at one resourceVersion, keeping
// at most maxPods.
func (w *Watcher) list(ctx context.Context, pods typedcorev1.PodInterface, sel string) ([]*podEntry, string, error) {
	var out []*podEntry
	opts := metav1.ListOptions{LabelSelector: sel, Limit: w.lim.pageSize}
	for {
		page, err := pods.List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		for i := range page.Items {
			if len(out) == w.lim.maxPods {
				w.count(KindSeedTruncated)
				w.log.Warn("kubernetes pod discovery list truncated", "namespace", w.cfg.Namespace, "kept", w.lim.maxPods)
				return out, page.ResourceVersion, nil
			}
			p := &page.Items[i]
			out = append(out, w.fleet.describe(p, w.fleet.pods[p.Name]))
		}
		if page.Continue == "" {
			return out, page.ResourceVersion, nil
		}
		opts.Continue = page.Continue
	}
}

// follow folds watch events until the watch ends.
func (w *Watcher) follow(ctx context.Context, wi watch.Interface) passEnd {
	idle := w.clk.NewTimer(w.lim.idleTimeout)
	defer func() { idle.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return passEnd{}
		case <-idle.C():
			return passEnd{kind: KindWatchEnded, stage: "watch", err: fmt.Errorf("no event for %s", w.lim.idleTimeout)}
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return passEnd{kind: KindWatchEnded, stage: "watch", err: errors.New("watch closed"), closed: true}
			}
			idle.Stop()
			idle = w.clk.NewTimer(w.lim.idleTimeout)
			if end, stop := w.fold(ev); stop {
				return end
			}
		}
	}
}

// fold applies one watch event; stop reports an error event, which ends
// the pass.
func (w *Watcher) fold(ev watch.Event) (passEnd, bool) {
	var batch []events.Event
	switch ev.Type {
	case watch.Error:
		err := apierrors.FromObject(ev.Object)
		return passEnd{kind: endKind(err, KindWatchEnded), stage: "watch", err: err}, true
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

// endKind counts an expired resourceVersion (410 Gone) as compaction, as
// the etcd source does; other errors as fallback.
func endKind(err error, fallback string) string {
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return KindCompacted
	}
	return fallback
}
