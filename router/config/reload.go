package config

import (
	"reflect"
	"slices"
	"strings"
)

// ReloadAction is what the discovery supervisor must do to move from one
// configuration to the next.
type ReloadAction int

const (
	// ReloadNone leaves the running watcher alone.
	ReloadNone ReloadAction = iota
	// ReloadStart starts discovery (it was disabled).
	ReloadStart
	// ReloadStop stops discovery; it is not counted as a restart.
	ReloadStop
	// ReloadReplace replaces the watcher and empties the registry.
	ReloadReplace
	// ReloadReplaceKeepSnapshot replaces the watcher but keeps serving the
	// current snapshot until the replacement's first full resync.
	ReloadReplaceKeepSnapshot
	// ReloadPrune replaces the watcher, drops only the workers and
	// publishers of removed namespaces, and keeps the kept ones routable.
	ReloadPrune
)

func (a ReloadAction) String() string {
	switch a {
	case ReloadNone:
		return "none"
	case ReloadStart:
		return "start"
	case ReloadStop:
		return "stop"
	case ReloadReplace:
		return "replace"
	case ReloadReplaceKeepSnapshot:
		return "replace_keep_snapshot"
	case ReloadPrune:
		return "prune"
	}
	return "unknown"
}

// Reasons logged with a reload and used as the restart metric's context.
const (
	ReasonEnabled    = "enabled"
	ReasonSource     = "source"
	ReasonNamespace  = "namespace"
	ReasonNamespaces = "namespaces"
	ReasonConnection = "connection"
	ReasonBackoff    = "backoff"
	ReasonOther      = "other"
)

// DiscoveryReload is the reload class of a configuration change.
type DiscoveryReload struct {
	Action ReloadAction
	Reason string
}

// DiscoveryChange classifies the change from old to new as seen by the
// discovery watcher. Both should be parsed (defaults filled); a nil config
// counts as disabled. Only the selected source's block matters: editing the
// etcd block while a Kubernetes source runs changes nothing.
func DiscoveryChange(old, new *Config) DiscoveryReload {
	was := old != nil && old.Dynamo.Enabled
	is := new != nil && new.Dynamo.Enabled
	switch {
	case !was && !is:
		return DiscoveryReload{}
	case !was:
		return DiscoveryReload{ReloadStart, ReasonEnabled}
	case !is:
		return DiscoveryReload{ReloadStop, ReasonEnabled}
	}
	o, n := old.Dynamo.Discovery, new.Dynamo.Discovery
	if o.Source != n.Source {
		return DiscoveryReload{ReloadReplace, ReasonSource}
	}
	if n.Source == SourceEtcd {
		return etcdChange(o, n)
	}
	if n.Source == SourceInferencePool {
		return poolChange(old, new)
	}
	return kubernetesChange(o, n)
}

func etcdChange(o, n Discovery) DiscoveryReload {
	oe, ne := o.Etcd, n.Etcd
	if !slices.Equal(oe.EffectiveEndpoints(), ne.EffectiveEndpoints()) ||
		!reflect.DeepEqual(oe.TLS, ne.TLS) || !reflect.DeepEqual(oe.Auth, ne.Auth) || oe.Embedded != ne.Embedded {
		return DiscoveryReload{ReloadReplace, ReasonConnection}
	}
	if r, changed := namespacesChange(o.Namespaces(), n.Namespaces(), func(string) bool { return true }); changed {
		return r
	}
	if oe.WatchReconnectBackoff != ne.WatchReconnectBackoff {
		return DiscoveryReload{ReloadReplaceKeepSnapshot, ReasonBackoff}
	}
	return DiscoveryReload{}
}

func kubernetesChange(o, n Discovery) DiscoveryReload {
	ok, nk := o.Kubernetes, n.Kubernetes
	if ok.Namespace != nk.Namespace {
		return DiscoveryReload{ReloadReplace, ReasonNamespace}
	}
	// Only kubernetes_pods reads model/models; the metadata source takes
	// models from the cards, so edits there are no-ops.
	pods := n.Source == SourceKubernetesPods
	keptSame := func(ns string) bool { return !pods || podModels(ok, ns) == podModels(nk, ns) }
	if r, changed := namespacesChange(o.Namespaces(), n.Namespaces(), keptSame); changed {
		return r
	}
	if pods && (ok.Model != nk.Model || !slices.Equal(ok.Models, nk.Models)) {
		return DiscoveryReload{ReloadReplace, ReasonOther}
	}
	if ok.WatchReconnectBackoff != nk.WatchReconnectBackoff {
		return DiscoveryReload{ReloadReplaceKeepSnapshot, ReasonBackoff}
	}
	return DiscoveryReload{}
}

// namespacesChange classifies a change of the watched namespace list.
// Pruning is possible only when some namespace is kept and every kept one
// would materialize the same workers; otherwise the registry is reset.
func namespacesChange(old, new []string, keptSame func(string) bool) (DiscoveryReload, bool) {
	if slices.Equal(old, new) {
		return DiscoveryReload{}, false
	}
	kept := 0
	for _, ns := range new {
		if !slices.Contains(old, ns) {
			continue
		}
		if !keptSame(ns) {
			return DiscoveryReload{ReloadReplace, ReasonOther}, true
		}
		kept++
	}
	if kept == 0 {
		return DiscoveryReload{ReloadReplace, ReasonNamespace}, true
	}
	return DiscoveryReload{ReloadPrune, ReasonNamespaces}, true
}

// podModels is a canonical description of what kubernetes_pods assigns to
// the Pods of one Dynamo namespace.
func podModels(kd KubernetesDiscovery, ns string) string {
	if kd.Model != "" {
		return "*=" + kd.Model
	}
	var parts []string
	for _, m := range kd.Models {
		owner := m.DynamoNamespace
		if owner == "" {
			owner = kd.DynamoNamespace
		}
		if owner == ns {
			parts = append(parts, m.Component+"="+m.Model)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "\n")
}
