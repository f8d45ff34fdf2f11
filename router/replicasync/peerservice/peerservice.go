// Package peerservice finds a replica's replica-sync peers through a
// Kubernetes Service (epp.peer_service, DYN_EPP_PEER_SERVICE): the ready
// endpoints of the Service's EndpointSlices, this Pod's own address left
// out, each with the replica-sync port, are the peers. A client-go
// informer lists the slices, then watches them (relisting after an
// expired watch by itself), so the list follows replicas as they come and
// go. It needs get, list and watch on endpointslices in its namespace.
package peerservice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// MaxPeers bounds the peers taken from the Service, as the routing core
// follows at most 64; further endpoints are left out (in address order)
// and logged.
const MaxPeers = 64

// Options configure a Watcher.
type Options struct {
	// Namespace is the Service's namespace, the endpoint picker's own.
	Namespace string
	// Service is the Service's name.
	Service string
	// Port is the replica-sync port every peer listens on.
	Port int
	// Self are this Pod's own addresses, left out of the peers.
	Self []string
	// Set receives the peers, sorted, each time they change (the first
	// time once the initial list is read). It is called from one goroutine.
	Set func(peers []string)
	// REST, when set, is used instead of in-cluster credentials or a
	// kubeconfig (tests point it at their API server).
	REST *rest.Config
	Log  *slog.Logger
}

// Watcher follows one Service's EndpointSlices.
type Watcher struct {
	o      Options
	cancel context.CancelFunc
	done   chan struct{}
}

// Start lists the Service's EndpointSlices and follows them until Close.
func Start(o Options) (*Watcher, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Namespace == "" || o.Service == "" || o.Port <= 0 || o.Port > 65535 || o.Set == nil {
		return nil, errors.New("peer service: namespace, service, port and Set are required")
	}
	rc := o.REST
	if rc == nil {
		var err error
		if rc, err = restConfig(); err != nil {
			return nil, fmt.Errorf("peer service: %w", err)
		}
	} else {
		rc = rest.CopyConfig(rc)
	}
	rc.UserAgent = "switchyard"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("peer service: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{o: o, cancel: cancel, done: make(chan struct{})}
	f := informers.NewSharedInformerFactoryWithOptions(cs, resyncNever, informers.WithNamespace(o.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.LabelSelector = discoveryv1.LabelServiceName + "=" + o.Service
		}))
	inf := f.Discovery().V1().EndpointSlices().Informer()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, DeleteFunc: poke, UpdateFunc: func(_, n any) { poke(n) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("peer service: %w", err)
	}
	f.Start(ctx.Done())
	go func() {
		defer close(w.done)
		defer f.Shutdown()
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return
		}
		var last []string
		first := true
		for {
			peers := w.peers(inf.GetStore().List())
			if first || !slices.Equal(peers, last) {
				o.Log.Info("replica sync: peers from the Service", "service", o.Service, "peers", len(peers))
				o.Set(peers)
				last, first = peers, false
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	return w, nil
}

// Close stops following.
func (w *Watcher) Close() {
	w.cancel()
	<-w.done
}

// peers are the ready endpoints' addresses of the slices, sorted, without
// this Pod's, at most MaxPeers. An endpoint counts when its ready
// condition is true (unset counts as not ready) and it is not
// terminating; its first address is used (an endpoint's addresses are
// interchangeable).
func (w *Watcher) peers(objs []any) []string {
	self := map[string]bool{}
	for _, a := range w.o.Self {
		self[a] = true
	}
	seen := map[string]bool{}
	var out []string
	for _, obj := range objs {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		for _, ep := range s.Endpoints {
			c := ep.Conditions
			if c.Ready == nil || !*c.Ready || (c.Terminating != nil && *c.Terminating) || len(ep.Addresses) == 0 {
				continue
			}
			addr := ep.Addresses[0]
			if self[addr] || seen[addr] || strings.ContainsAny(addr, " /") {
				continue
			}
			seen[addr] = true
			out = append(out, net.JoinHostPort(addr, strconv.Itoa(w.o.Port)))
		}
	}
	slices.Sort(out)
	if len(out) > MaxPeers {
		w.o.Log.Warn("replica sync: the Service has more ready endpoints than peers are followed", "service", w.o.Service,
			"endpoints", len(out), "followed", MaxPeers)
		out = out[:MaxPeers]
	}
	return out
}

// SelfFromEnvironment are this Pod's addresses as the downward API gives
// them: POD_IP, and POD_IPS (comma-separated, dual-stack).
func SelfFromEnvironment(lookup func(string) (string, bool)) []string {
	var out []string
	for _, name := range []string{"POD_IP", "POD_IPS"} {
		v, _ := lookup(name)
		for a := range strings.SplitSeq(v, ",") {
			if a = strings.TrimSpace(a); a != "" && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// serviceAccountNamespace is where the kubelet writes the Pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// NamespaceFromEnvironment is this Pod's namespace: POD_NAMESPACE, else
// the service account's namespace file; empty when neither says.
func NamespaceFromEnvironment(lookup func(string) (string, bool)) string {
	if v, ok := lookup("POD_NAMESPACE"); ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v)
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
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

// resyncNever documents the informer's zero resync period: the list is
// rebuilt from events, never on a timer.
const resyncNever = time.Duration(0)
