package k8ssource

import (
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// testPod is a Pod labelled as the Dynamo operator labels workers.
func testPod(name, dynamoNamespace, componentType, subType, component string) *corev1.Pod {
	l := map[string]string{
		labelBackend:         "kubernetes",
		labelEnabled:         "true",
		labelDynamoNamespace: dynamoNamespace,
		labelComponentType:   componentType,
	}
	if subType != "" {
		l[labelSubComponentType] = subType
	}
	if component != "" {
		l[labelComponent] = component
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "worker:latest"}}},
	}
}

// setReady gives the Pod the status a kubelet reports for a running Pod
// that passes (or fails) its readiness probe.
func setReady(p *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
}
