package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
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
	configMaps := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns)
	for name, args := range map[string][]string{
		"bench":       append(sweepArgs(trace), "--job-name", "bench-sweep", "--namespace", ns, "--cpu", "500m", "--memory", "1Gi"),
		"bench-claim": append(sweepArgs(trace), "--job-name", "bench-claim", "--namespace", ns, "--inputs-claim", "traces"),
		"tune":        {"tune", "--scenario", sc, "--sweep", "seeds=1,2", "--job-name", "tune-sweep", "--namespace", ns, "--job-parallelism", "30"},
	} {
		t.Run(name, func(t *testing.T) {
			emit := t.TempDir()
			out, err := run(t, append(args, "--emit-job", emit, "--image", "registry.example/switchyard:v1")...)
			require.NoError(t, err, out)
			js, err := yaml.YAMLToJSON(readBytes(t, filepath.Join(emit, "job.yaml")))
			require.NoError(t, err)
			u := &unstructured.Unstructured{}
			require.NoError(t, u.UnmarshalJSON(js))

			// The inputs: a ConfigMap unless every input is on the claim.
			cm := filepath.Join(emit, "inputs.yaml")
			if name == "bench-claim" {
				assert.NoFileExists(t, cm, "the trace is on the claim")
			} else {
				js, err := yaml.YAMLToJSON(readBytes(t, cm))
				require.NoError(t, err)
				c := &unstructured.Unstructured{}
				require.NoError(t, c.UnmarshalJSON(js))
				got, err := configMaps.Apply(t.Context(), c.GetName(), c, metav1.ApplyOptions{FieldManager: "switchyard-sweep-test", DryRun: []string{metav1.DryRunAll}})
				require.NoError(t, err, "apply %s", c.GetName())
				data, _, _ := unstructured.NestedStringMap(got.Object, "data")
				assert.Len(t, data, 1)
				for _, v := range data {
					want := trace
					if name == "tune" {
						want = sc
					}
					assert.Equal(t, string(readBytes(t, want)), v)
				}
				_, err = configMaps.Get(t.Context(), c.GetName(), metav1.GetOptions{})
				assert.True(t, apierrors.IsNotFound(err), "a dry run created the ConfigMap: %v", err)
			}

			got, err := jobs.Apply(t.Context(), u.GetName(), u, metav1.ApplyOptions{FieldManager: "switchyard-sweep-test", DryRun: []string{metav1.DryRunAll}})
			require.NoError(t, err, "apply %s", u.GetName())
			mode, _, _ := unstructured.NestedString(got.Object, "spec", "completionMode")
			completions, _, _ := unstructured.NestedInt64(got.Object, "spec", "completions")
			parallelism, _, _ := unstructured.NestedInt64(got.Object, "spec", "parallelism")
			perIndex, _, _ := unstructured.NestedInt64(got.Object, "spec", "backoffLimitPerIndex")
			assert.Equal(t, "Indexed", mode)
			assert.Equal(t, 1, int(perIndex))
			mounts, _, _ := unstructured.NestedSlice(got.Object, "spec", "template", "spec", "containers")
			vm := mounts[0].(map[string]any)["volumeMounts"].([]any)
			require.Len(t, vm, 3)
			input := vm[2].(map[string]any)
			assert.Equal(t, map[bool]string{true: trace, false: sc}[name != "tune"], input["mountPath"])
			assert.Equal(t, true, input["readOnly"])
			if name == "bench-claim" {
				assert.Equal(t, "inputs-claim", input["name"])
				assert.Equal(t, trace[1:], input["subPath"], "on the claim at the path the command names")
			}
			if name != "tune" {
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

// A cell runs in the Job's Pod on nothing but what the Job mounts: the emitted ConfigMap's
// files laid out where the Job mounts them, in the Pod's working folder, give the cell that
// --cell gives here, byte for byte. The scenario names its trace by a path relative to itself,
// and the trace is carried too.
func TestSweepJobCellRunsOnItsCarriedInputs(t *testing.T) {
	work := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(work, "in"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(work, "in", "t.jsonl"), readBytes(t, miniTrace(t, 12)), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(work, "in", "sc.yaml"),
		[]byte("name: carried\nseed: 5\nfleet:\n  - {role: aggregated, count: 2}\nworkload:\n  trace:\n    path: t.jsonl\n"), 0o644))
	t.Chdir(work)
	args := []string{"bench", "pickers", "--scenario", "in/sc.yaml", "--pickers", "round_robin,kv", "--sweep", "seeds=1,2"}
	emit := t.TempDir()
	out, err := run(t, append(args, "--emit-job", emit, "--image", "switchyard:test")...)
	require.NoError(t, err, out)
	local := runCell(t, args, t.TempDir(), 1)

	var cm corev1.ConfigMap
	require.NoError(t, yaml.UnmarshalStrict(readBytes(t, filepath.Join(emit, "inputs.yaml")), &cm))
	var j batchv1.Job
	require.NoError(t, yaml.UnmarshalStrict(readBytes(t, filepath.Join(emit, "job.yaml")), &j))
	c := j.Spec.Template.Spec.Containers[0]
	pod := t.TempDir()
	carried := 0
	for _, m := range c.VolumeMounts {
		if m.Name != "inputs" {
			continue
		}
		assert.True(t, m.ReadOnly)
		p := filepath.Join(pod, m.MountPath)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(cm.Data[m.SubPath]), 0o644))
		carried++
	}
	assert.Equal(t, 2, carried, "the scenario and the trace it names")
	require.Equal(t, "/inputs", c.WorkingDir)
	t.Chdir(filepath.Join(pod, c.WorkingDir))
	results := t.TempDir()
	var podArgs []string
	for _, a := range c.Args {
		a = strings.ReplaceAll(a, "$(JOB_COMPLETION_INDEX)", "1")
		podArgs = append(podArgs, strings.Replace(a, "/results/", results+"/", 1))
	}
	out, err = run(t, podArgs...)
	require.NoError(t, err, out)
	for _, f := range []string{"summary.json", "summary.md", "index.html"} {
		assert.Equal(t, string(readBytes(t, filepath.Join(local, f))), string(readBytes(t, filepath.Join(results, "cell-1", f))), f)
	}
}

// Inputs a ConfigMap cannot carry are refused with the way out; on a claim they need not be
// here at all.
func TestSweepJobRefusesInputsItCannotCarry(t *testing.T) {
	big := writeFile(t, "big.jsonl", strings.Repeat(`{"timestamp": 0, "input_length": 16, "output_length": 2, "hash_ids": [1]}`+"\n", 20000))
	emit := t.TempDir()
	base := []string{"bench", "pickers", "--workers", "2", "--sweep", "seeds=1,2", "--emit-job", emit, "--image", "x"}
	_, err := run(t, append(base, "--trace", big)...)
	requireExit1(t, err)
	assert.Contains(t, err.Error(), "more than a ConfigMap carries")
	assert.Contains(t, err.Error(), "--inputs-claim NAME")
	assert.NoFileExists(t, filepath.Join(emit, "job.yaml"))

	out, err := run(t, append(base, "--trace", "/data/elsewhere.jsonl", "--inputs-claim", "traces")...)
	require.NoError(t, err, out)
	assert.Contains(t, out, "input --trace /data/elsewhere.jsonl (claim traces)")
	assert.NoFileExists(t, filepath.Join(emit, "inputs.yaml"))

	_, err = run(t, append(base, "--trace", "/data/elsewhere.jsonl")...)
	requireExit1(t, err)
	assert.Contains(t, err.Error(), "--trace /data/elsewhere.jsonl: no file to carry into the Job")
	_, err = run(t, "bench", "pickers", "--workers", "2", "--trace", big, "--sweep", "seeds=1,2", "--cell", "0", "--out", emit, "--inputs-claim", "x")
	requireExit1(t, err)
	assert.Contains(t, err.Error(), "--inputs-claim applies to --emit-job only")
}
