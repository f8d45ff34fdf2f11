package config

import (
	"slices"
	"strings"
)

const maxPodModels = 256

// kubernetes checks the kubernetes block when a Kubernetes source is
// selected; under etcd the block is unused and left alone.
func (k *checker) kubernetes(c *Config) {
	src := c.Dynamo.Discovery.Source
	if src != SourceKubernetes && src != SourceKubernetesPods {
		return
	}
	const p = "dynamo.discovery.kubernetes"
	kd := c.Dynamo.Discovery.Kubernetes
	k.errIf(p+".namespace", labelProblem(kd.Namespace))
	switch {
	case kd.DynamoNamespace != "" && len(kd.DynamoNamespaces) > 0:
		k.err(p+".dynamo_namespaces", "cannot be combined with dynamo_namespace; list every namespace in dynamo_namespaces")
	case kd.DynamoNamespace == "" && len(kd.DynamoNamespaces) == 0:
		k.err(p+".dynamo_namespace", "must not be empty (or list dynamo_namespaces)")
	case kd.DynamoNamespace != "":
		k.errIf(p+".dynamo_namespace", dynamoLabelProblem(kd.DynamoNamespace))
	default:
		k.uniqueList(p+".dynamo_namespaces", kd.DynamoNamespaces, MaxNamespaces, dynamoLabelProblem)
	}
	k.backoff(p+".watch_reconnect_backoff", kd.WatchReconnectBackoff)

	if src == SourceKubernetes {
		const ignored = "ignored under source kubernetes: each worker's model comes from its model card"
		if kd.Model != "" {
			k.warn(p+".model", ignored)
		}
		if len(kd.Models) > 0 {
			k.warn(p+".models", ignored)
		}
		return
	}
	k.warn("dynamo.discovery.source", "kubernetes_pods gives no capacity or load signals (Pods carry no model cards): selection rotates round-robin; prefer source kubernetes where RBAC allows")
	k.podModels(p, kd)
}

// dynamoLabelProblem: a Dynamo namespace selected by Pod label must be both
// a valid label value and a valid Dynamo namespace.
func dynamoLabelProblem(s string) string {
	if msg := labelValueProblem(s); msg != "" {
		return msg
	}
	return namespaceProblem(s)
}

// podModels checks that exactly one of model and models says what the
// selected Pods serve.
func (k *checker) podModels(p string, kd KubernetesDiscovery) {
	switch {
	case kd.Model != "" && len(kd.Models) > 0:
		k.err(p+".models", "set exactly one of model or models, not both")
		return
	case kd.Model == "" && len(kd.Models) == 0:
		k.err(p+".model", "required under kubernetes_pods: set model, or models per component")
		return
	case kd.Model != "":
		k.errIf(p+".model", modelNameProblem(kd.Model))
		return
	}
	if len(kd.Models) > maxPodModels {
		k.err(p+".models", "at most %d entries, got %d", maxPodModels, len(kd.Models))
	}
	multi := len(kd.DynamoNamespaces) > 0
	seen := map[[2]string]int{}
	for i, m := range kd.Models {
		q := index(p+".models", i)
		k.errIf(q+".component", labelValueProblem(m.Component))
		k.errIf(q+".model", modelNameProblem(m.Model))
		ns := m.DynamoNamespace
		switch {
		case multi && ns == "":
			k.err(q+".dynamo_namespace", "required when dynamo_namespaces lists several graphs")
		case multi && !slices.Contains(kd.DynamoNamespaces, ns):
			k.err(q+".dynamo_namespace", "%q is not listed in dynamo_namespaces", ns)
		case !multi && ns != "" && ns != kd.DynamoNamespace:
			k.err(q+".dynamo_namespace", "%q differs from dynamo_namespace %q", ns, kd.DynamoNamespace)
		}
		if !multi {
			ns = kd.DynamoNamespace
		}
		key := [2]string{ns, m.Component}
		if j, dup := seen[key]; dup {
			k.err(q+".component", "duplicate of %s.component", index(p+".models", j))
		} else {
			seen[key] = i
		}
	}
}

func modelNameProblem(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case strings.ContainsFunc(s, isSpaceOrControl):
		return "must not contain whitespace or control characters"
	}
	return ""
}
