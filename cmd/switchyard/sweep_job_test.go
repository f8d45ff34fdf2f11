package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"switchyard/internal/kubetest"
)

// The emitted Jobs of bench pickers and tune are accepted by a real API
// server (schema, defaulting, validation of an Indexed Job with a per-index
// backoff limit) through a server-side apply dry run that leaves nothing
// behind.
func TestSweepJobAppliesOnAnAPIServer(t *testing.T) {
	trace := miniTrace(t, 5)
	sc := tuneScenarioFile(t, 10)
	ns := kubetest.Namespace(t)
	dyn, err := dynamic.NewForConfig(kubetest.Config(t))
	require.NoError(t, err)
	jobs := dyn.Resource(schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}).Namespace(ns)
	for name, args := range map[string][]string{
		"bench": append(sweepArgs(trace), "--job-name", "bench-sweep", "--namespace", ns, "--cpu", "500m", "--memory", "1Gi"),
		"tune":  {"tune", "--scenario", sc, "--sweep", "seeds=1,2", "--job-name", "tune-sweep", "--namespace", ns, "--job-parallelism", "30"},
	} {
		t.Run(name, func(t *testing.T) {
			emit := t.TempDir()
			out, err := run(t, append(args, "--emit-job", emit, "--image", "registry.example/switchyard:v1")...)
			require.NoError(t, err, out)
			js, err := yaml.YAMLToJSON(readBytes(t, filepath.Join(emit, "job.yaml")))
			require.NoError(t, err)
			u := &unstructured.Unstructured{}
			require.NoError(t, u.UnmarshalJSON(js))

			got, err := jobs.Apply(t.Context(), u.GetName(), u, metav1.ApplyOptions{FieldManager: "switchyard-sweep-test", DryRun: []string{metav1.DryRunAll}})
			require.NoError(t, err, "apply %s", u.GetName())
			mode, _, _ := unstructured.NestedString(got.Object, "spec", "completionMode")
			completions, _, _ := unstructured.NestedInt64(got.Object, "spec", "completions")
			parallelism, _, _ := unstructured.NestedInt64(got.Object, "spec", "parallelism")
			perIndex, _, _ := unstructured.NestedInt64(got.Object, "spec", "backoffLimitPerIndex")
			assert.Equal(t, "Indexed", mode)
			assert.Equal(t, 1, int(perIndex))
			if name == "bench" {
				assert.Equal(t, 4, int(completions))
				assert.Equal(t, 4, int(parallelism), "min(cells, 8)")
			} else {
				assert.Equal(t, 30, int(completions), "2 seeds × (current + 14 grid points)")
				assert.Equal(t, 30, int(parallelism))
			}
			_, err = jobs.Get(t.Context(), u.GetName(), metav1.GetOptions{})
			assert.True(t, apierrors.IsNotFound(err), "a dry run created the Job: %v", err)
		})
	}
}
