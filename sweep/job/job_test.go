package job

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func spec() Spec {
	return Spec{Name: "sweep-a", Image: "registry.example/switchyard:v1", Args: []string{"bench", "pickers", "--workers=2"},
		SweepID: "0123456789abcdef", Cells: 6, Parallelism: 3, Retries: 1, ResultsClaim: "switchyard-sweep-results", CPU: "2", Memory: "1Gi"}
}

func TestTheJobRunsOneCellPerIndex(t *testing.T) {
	body, err := spec().YAML()
	require.NoError(t, err)
	assert.NotContains(t, string(body), "status:")
	var j batchv1.Job
	require.NoError(t, yaml.UnmarshalStrict(body, &j))
	assert.Equal(t, batchv1.IndexedCompletion, *j.Spec.CompletionMode)
	assert.Equal(t, int32(6), *j.Spec.Completions)
	assert.Equal(t, int32(3), *j.Spec.Parallelism)
	assert.Equal(t, int32(1), *j.Spec.BackoffLimitPerIndex)
	pod := j.Spec.Template.Spec
	assert.Equal(t, "Never", string(pod.RestartPolicy))
	c := pod.Containers[0]
	assert.Equal(t, []string{"bench", "pickers", "--workers=2", "--cell", "$(JOB_COMPLETION_INDEX)", "--out", "/results/cell-$(JOB_COMPLETION_INDEX)"}, c.Args)
	assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
	assert.True(t, *c.SecurityContext.RunAsNonRoot)
	assert.Equal(t, "1Gi", c.Resources.Limits.Memory().String())
	assert.Equal(t, "2", c.Resources.Requests.Cpu().String())
	assert.Equal(t, "switchyard-sweep-results", pod.Volumes[0].PersistentVolumeClaim.ClaimName)
}

func TestCheckNamesTheFlagToFix(t *testing.T) {
	for want, edit := range map[string]func(*Spec){
		"--image is required":  func(s *Spec) { s.Image = "" },
		"--job-name":           func(s *Spec) { s.Name = "Not_A_Name" },
		"--namespace":          func(s *Spec) { s.Namespace = "a/b" },
		"--results-claim":      func(s *Spec) { s.ResultsClaim = "" },
		"--job-parallelism 7":  func(s *Spec) { s.Parallelism = 7 },
		"--retries -1":         func(s *Spec) { s.Retries = -1 },
		"--cpu \"two\"":        func(s *Spec) { s.CPU = "two" },
		"--memory":             func(s *Spec) { s.Memory = "1GB!" },
		"the grid has 0 cells": func(s *Spec) { s.Cells, s.Parallelism = 0, 1 },
	} {
		s := spec()
		edit(&s)
		_, err := s.YAML()
		require.Error(t, err, want)
		assert.True(t, strings.Contains(err.Error(), want), "%q in %v", want, err)
	}
}

func writeTemp(t *testing.T, name string, body []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, body, 0o644))
	return p
}

// Every input is mounted read-only where the command names it: a relative path under the
// working folder, an absolute one as it is; small files from the ConfigMap (binary ones as
// binaryData), traces from the inputs claim when one is given.
func TestInputsAreMountedWhereTheCommandNamesThem(t *testing.T) {
	sc := writeTemp(t, "sc.yaml", []byte("name: x\n"))
	tr := writeTemp(t, "t.jsonl", []byte("{}\n"))
	rec := writeTemp(t, "r.db", []byte{0xff, 0xfe, 0})
	s := spec()
	s.Inputs = []Input{
		{Path: "in/sc.yaml", Source: sc, What: "--scenario"},
		{Path: "in/t.jsonl", Source: tr, Large: true, What: "workload.trace.path of in/sc.yaml"},
		{Path: "/data/r.db", Source: rec, Large: true, What: "--recording"},
		{Path: "in/sc.yaml", Source: sc, What: "--scenario"}, // a swept value given twice is mounted once
	}
	j, err := s.Job()
	require.NoError(t, err)
	c := j.Spec.Template.Spec.Containers[0]
	assert.Equal(t, WorkDir, c.WorkingDir)
	assert.Equal(t, []corev1.VolumeMount{
		{Name: "results", MountPath: "/results"}, {Name: "tmp", MountPath: "/tmp"},
		{Name: "inputs", MountPath: "/inputs/in/sc.yaml", SubPath: "00-sc.yaml", ReadOnly: true},
		{Name: "inputs", MountPath: "/inputs/in/t.jsonl", SubPath: "01-t.jsonl", ReadOnly: true},
		{Name: "inputs", MountPath: "/data/r.db", SubPath: "02-r.db", ReadOnly: true},
	}, c.VolumeMounts)
	cm, err := s.ConfigMap()
	require.NoError(t, err)
	assert.Equal(t, "sweep-a-inputs", cm.Name)
	assert.Equal(t, map[string]string{"00-sc.yaml": "name: x\n", "01-t.jsonl": "{}\n"}, cm.Data)
	assert.Equal(t, map[string][]byte{"02-r.db": {0xff, 0xfe, 0}}, cm.BinaryData)
	assert.Equal(t, "sweep-a-inputs", j.Spec.Template.Spec.Volumes[2].ConfigMap.Name)

	s.InputsClaim = "traces"
	j, err = s.Job()
	require.NoError(t, err)
	mounts := j.Spec.Template.Spec.Containers[0].VolumeMounts[2:]
	assert.Equal(t, []corev1.VolumeMount{
		{Name: "inputs", MountPath: "/inputs/in/sc.yaml", SubPath: "00-sc.yaml", ReadOnly: true},
		{Name: "inputs-claim", MountPath: "/inputs/in/t.jsonl", SubPath: "in/t.jsonl", ReadOnly: true},
		{Name: "inputs-claim", MountPath: "/data/r.db", SubPath: "data/r.db", ReadOnly: true},
	}, mounts)
	vols := j.Spec.Template.Spec.Volumes
	require.Len(t, vols, 4)
	assert.Equal(t, "traces", vols[3].PersistentVolumeClaim.ClaimName)
	assert.True(t, vols[3].PersistentVolumeClaim.ReadOnly)
	cm, err = s.ConfigMap()
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"00-sc.yaml": "name: x\n"}, cm.Data)
	assert.Nil(t, cm.BinaryData)

	// Absolute paths only: the image's working folder is kept; no inputs: no ConfigMap.
	s = spec()
	s.Inputs = []Input{{Path: "/data/r.db", Large: true, What: "--recording"}}
	s.InputsClaim = "traces"
	j, err = s.Job()
	require.NoError(t, err)
	assert.Equal(t, "", j.Spec.Template.Spec.Containers[0].WorkingDir)
	cm, err = s.ConfigMap()
	require.NoError(t, err)
	assert.Nil(t, cm)
	body, err := s.InputsYAML()
	require.NoError(t, err)
	assert.Nil(t, body)
}

// Inputs past what a ConfigMap holds are refused before any is read whole, naming the
// files and the way out.
func TestInputsPastAConfigMapAreRefused(t *testing.T) {
	big := writeTemp(t, "big.jsonl", make([]byte, MaxConfigMapBytes-10))
	small := writeTemp(t, "sc.yaml", make([]byte, 11))
	s := spec()
	s.Inputs = []Input{{Path: big, Source: big, Large: true, What: "--trace"}, {Path: small, Source: small, What: "--scenario"}}
	_, err := s.ConfigMap()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "more than a ConfigMap carries")
	assert.Contains(t, err.Error(), "--trace "+big+" (1032182 bytes)")
	assert.Contains(t, err.Error(), "--inputs-claim NAME")

	s.Inputs = s.Inputs[:1] // exactly at the limit less ten bytes: carried
	cm, err := s.ConfigMap()
	require.NoError(t, err)
	assert.Len(t, cm.Data["00-big.jsonl"], MaxConfigMapBytes-10)

	s.InputsClaim = "traces" // the trace moves to the claim
	s.Inputs = []Input{{Path: big, Source: big, Large: true, What: "--trace"}, {Path: small, Source: small, What: "--scenario"}}
	cm, err = s.ConfigMap()
	require.NoError(t, err)
	assert.Len(t, cm.Data, 1)
}

func TestInputsTheJobCannotMountAreRefused(t *testing.T) {
	f := writeTemp(t, "a.yaml", []byte("a"))
	g := writeTemp(t, "b.yaml", []byte("b"))
	for want, in := range map[string][]Input{
		"one of the Job's own folders":             {{Path: "/results/x.yaml", Source: f, What: "--fleet"}},
		"--scenario ../..: the Pod reads it at /,": {{Path: "../..", Source: f, What: "--scenario"}},
		"not a path a Pod can mount":               {{Path: "c:x", Source: f, What: "--fleet"}},
		"no file to carry into the Job":            {{Path: "t.jsonl", Large: true, What: "--trace"}},
		"are both read at /inputs/a.yaml":          {{Path: "a.yaml", Source: f, What: "--fleet"}, {Path: "/inputs/a.yaml", Source: g, What: "--profile"}},
		"may not leave the working folder":         {{Path: "../t.jsonl", Large: true, What: "--trace"}},
		"--inputs-claim \"Bad\"":                   {},
	} {
		s := spec()
		s.Inputs = in
		if strings.Contains(want, "leave") || strings.Contains(want, "Bad") {
			s.InputsClaim = "traces"
			if strings.Contains(want, "Bad") {
				s.InputsClaim = "Bad"
			}
		}
		_, err := s.Job()
		require.Error(t, err, want)
		assert.Contains(t, err.Error(), want)
	}
}
