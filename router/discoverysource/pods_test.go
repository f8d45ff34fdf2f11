package discoverysource

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"switchyard/internal/kubetest"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource/k8ssource"
)

// workerPod creates a ready decode worker Pod of one component, labelled
// as the Dynamo operator labels it.
func workerPod(t *testing.T, ns, name, component string) {
	t.Helper()
	cs := kubetest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"nvidia.com/dynamo-discovery-backend":  "kubernetes",
			"nvidia.com/dynamo-discovery-enabled":  "true",
			"nvidia.com/dynamo-namespace":          "graph",
			"nvidia.com/dynamo-component-type":     "worker",
			"nvidia.com/dynamo-sub-component-type": "decode",
			"nvidia.com/dynamo-component":          component,
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "worker:latest"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
}

func podsConfig(ns string, models ...config.ComponentModel) *config.Config {
	c := config.Default()
	c.Dynamo.Enabled = true
	c.Dynamo.Discovery.Source = config.SourceKubernetesPods
	c.Dynamo.Discovery.Kubernetes.Namespace = ns
	c.Dynamo.Discovery.Kubernetes.DynamoNamespace = "graph"
	c.Dynamo.Discovery.Kubernetes.Models = models
	c.Dynamo.Discovery.Kubernetes.WatchReconnectBackoff = config.Backoff{
		Initial: config.Duration(50 * time.Millisecond), Max: config.Duration(500 * time.Millisecond)}
	return c
}

func modelsOf(s *discovery.Snapshot) map[uint64]string {
	out := map[uint64]string{}
	for _, w := range s.Workers {
		out[w.InstanceID] = w.Model
	}
	return out
}

// The production factory runs the Pod source for kubernetes_pods, finding
// the API server through KUBECONFIG, and a models edit replaces it.
func TestSupervisorRunsThePodSource(t *testing.T) {
	t.Setenv("KUBECONFIG", kubetest.Kubeconfig(t))
	ns := kubetest.Namespace(t)
	workerPod(t, ns, "pool-a-0", "VllmWorker-a")
	workerPod(t, ns, "pool-b-0", "VllmWorker-b")

	s, reg := newSupervisor(t)
	cfg := podsConfig(ns, config.ComponentModel{Component: "VllmWorker-a", Model: "model-a"})
	s.Apply(cfg)
	waitUntil(t, "pool a", func() bool { return len(reg.Snapshot().Workers) == 1 && s.Connected() })
	require.Equal(t, map[uint64]string{k8ssource.HashPodName("pool-a-0"): "model-a"}, modelsOf(reg.Snapshot()))
	require.Equal(t, config.SourceKubernetesPods, s.Source())

	c2 := cfg.Clone()
	c2.Dynamo.Discovery.Kubernetes.Models = append(c2.Dynamo.Discovery.Kubernetes.Models,
		config.ComponentModel{Component: "VllmWorker-b", Model: "model-b"})
	s.Apply(c2)
	waitUntil(t, "both pools", func() bool { return len(reg.Snapshot().Workers) == 2 && s.Connected() })
	require.Equal(t, map[uint64]string{
		k8ssource.HashPodName("pool-a-0"): "model-a",
		k8ssource.HashPodName("pool-b-0"): "model-b",
	}, modelsOf(reg.Snapshot()))
	require.Equal(t, uint64(1), s.Restarts())
}
