package job

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
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
