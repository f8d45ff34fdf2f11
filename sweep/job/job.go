// Package job renders a sweep as a Kubernetes Indexed Job: one Pod per
// completion index, each running one cell of the grid with the same
// command a person would type to run that cell locally, and writing its
// report folder to a shared volume (docs/sweeps.md).
package job

import (
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"switchyard/sweep"
)

// ResultsDir is where the results volume is mounted in each Pod; cell N
// writes its report folder to ResultsDir/cell-N.
const ResultsDir = "/results"

// IndexEnv is the variable Kubernetes sets to a Pod's completion index.
const IndexEnv = "JOB_COMPLETION_INDEX"

// indexAnnotation is the Pod annotation the index is read from, so the
// variable is defined even where the Job controller does not inject it.
const indexAnnotation = "batch.kubernetes.io/job-completion-index"

// user is the image's non-root user (the Dockerfile's USER).
const user = 65532

// Spec is what the Job runs.
type Spec struct {
	Name      string // the Job's name, a DNS-1123 label
	Namespace string // "" = the namespace kubectl applies to
	Image     string
	// Args are the command's arguments after the binary (e.g. "bench",
	// "pickers", flags...), without --cell and --out: the Job adds them.
	Args []string
	// SweepID fingerprints the sweep (sweep.ID), kept as a label.
	SweepID string
	Cells   int
	// Parallelism is how many Pods run at once (1..Cells).
	Parallelism int
	// Retries is how often one index may fail before the Job gives it up
	// (backoffLimitPerIndex); the other indexes keep running.
	Retries int
	// ResultsClaim is the PersistentVolumeClaim the cells write to.
	ResultsClaim string
	// CPU and Memory are each Pod's requests (Kubernetes quantities);
	// Memory is also its limit. "" = none.
	CPU, Memory string
	// Inputs are the files the cells read, each mounted read-only where the command names
	// it: from the inputs ConfigMap, or from InputsClaim for large ones when it is set.
	Inputs []Input
	// InputsClaim is an existing PersistentVolumeClaim holding the traces and recordings,
	// mounted read-only; "" = every input is carried in the ConfigMap.
	InputsClaim string
}

// Check refuses a spec the API server would refuse, or that would run
// something else than asked, with the flag to fix.
func (s Spec) Check() error {
	var errs []error
	for _, e := range validation.IsDNS1123Label(s.Name) {
		errs = append(errs, fmt.Errorf("--job-name %q: %s", s.Name, e))
	}
	if s.Namespace != "" {
		for _, e := range validation.IsDNS1123Label(s.Namespace) {
			errs = append(errs, fmt.Errorf("--namespace %q: %s", s.Namespace, e))
		}
	}
	for _, e := range validation.IsDNS1123Subdomain(s.ResultsClaim) {
		errs = append(errs, fmt.Errorf("--results-claim %q: %s", s.ResultsClaim, e))
	}
	if s.Image == "" {
		errs = append(errs, errors.New("--image is required with --emit-job: the switchyard image the cells run"))
	}
	if s.Cells < 1 || s.Cells > sweep.MaxCells {
		errs = append(errs, fmt.Errorf("the grid has %d cells: want 1..%d", s.Cells, sweep.MaxCells))
	}
	if s.Parallelism < 1 || s.Parallelism > max(s.Cells, 1) {
		errs = append(errs, fmt.Errorf("--job-parallelism %d: want 1..%d (the number of cells)", s.Parallelism, s.Cells))
	}
	if s.Retries < 0 || s.Retries > 100 {
		errs = append(errs, fmt.Errorf("--retries %d: want 0..100", s.Retries))
	}
	for _, q := range []struct{ flag, v string }{{"--cpu", s.CPU}, {"--memory", s.Memory}} {
		if q.v == "" {
			continue
		}
		if _, err := resource.ParseQuantity(q.v); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: not a Kubernetes quantity (e.g. 2, 500m, 4Gi)", q.flag, q.v))
		}
	}
	if err := s.checkInputs(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s Spec) labels() map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":      "switchyard",
		"app.kubernetes.io/component": "sweep",
		"switchyard.dev/sweep":        s.SweepID,
	}
}

// Job is the Indexed Job of the spec.
func (s Spec) Job() (*batchv1.Job, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	labels := s.labels()
	cells, par, retries := int32(s.Cells), int32(s.Parallelism), int32(s.Retries)
	indexed := batchv1.IndexedCompletion
	yes, no := true, false
	uid := int64(user)
	args := append(append([]string(nil), s.Args...),
		"--cell", "$("+IndexEnv+")", "--out", ResultsDir+"/cell-$("+IndexEnv+")")
	res := corev1.ResourceRequirements{}
	if s.CPU != "" || s.Memory != "" {
		res.Requests = corev1.ResourceList{}
	}
	if s.CPU != "" {
		res.Requests[corev1.ResourceCPU] = resource.MustParse(s.CPU)
	}
	if s.Memory != "" {
		m := resource.MustParse(s.Memory)
		res.Requests[corev1.ResourceMemory] = m
		res.Limits = corev1.ResourceList{corev1.ResourceMemory: m}
	}
	volumes := []corev1.Volume{
		{Name: "results", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: s.ResultsClaim}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	mounts := []corev1.VolumeMount{{Name: "results", MountPath: ResultsDir}, {Name: "tmp", MountPath: "/tmp"}}
	carried, inputs := s.mounts()
	if len(carried) > 0 {
		volumes = append(volumes, corev1.Volume{Name: "inputs", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: s.configMapName()}}}})
	}
	if len(inputs) > len(carried) {
		volumes = append(volumes, corev1.Volume{Name: "inputs-claim", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: s.InputsClaim, ReadOnly: true}}})
	}
	mounts = append(mounts, inputs...)
	workDir := ""
	if s.relative() {
		workDir = WorkDir
	}
	j := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			CompletionMode:       &indexed,
			Completions:          &cells,
			Parallelism:          &par,
			BackoffLimitPerIndex: &retries,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: &no,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:       "cell",
						Image:      s.Image,
						Args:       args,
						WorkingDir: workDir,
						Env: []corev1.EnvVar{{Name: IndexEnv, ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + indexAnnotation + "']"}}}},
						Resources: res,
						SecurityContext: &corev1.SecurityContext{
							RunAsNonRoot: &yes, AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
						VolumeMounts: mounts,
					}},
					Volumes: volumes,
				},
			},
		},
	}
	return j, nil
}

// YAML is the Job as a manifest for kubectl apply, with a comment that
// says what it runs.
func (s Spec) YAML() ([]byte, error) {
	j, err := s.Job()
	if err != nil {
		return nil, err
	}
	head := fmt.Sprintf("# A switchyard sweep of %d cells (sweep %s): completion index N runs cell N and\n"+
		"# writes its report folder to %s/cell-N on the claim %s.\n"+
		"# When every index has succeeded: switchyard reports merge <the claim's folder> --out DIR\n",
		s.Cells, s.SweepID, ResultsDir, s.ResultsClaim)
	return manifest(head, j)
}

// InputsYAML is the inputs ConfigMap as a manifest, or nil when every input is on the
// inputs claim (or there is none).
func (s Spec) InputsYAML() ([]byte, error) {
	cm, err := s.ConfigMap()
	if err != nil || cm == nil {
		return nil, err
	}
	head := fmt.Sprintf("# The input files of switchyard sweep %s, each mounted read-only in the cells' Pods\n"+
		"# where their command names it. Apply it before the Job.\n", s.SweepID)
	return manifest(head, cm)
}

// manifest is obj as YAML under a comment, without status: a manifest says what is wanted,
// not what is.
func manifest(head string, obj any) ([]byte, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	delete(u, "status")
	body, err := yaml.Marshal(u)
	if err != nil {
		return nil, fmt.Errorf("job: %w", err)
	}
	return append([]byte(head), body...), nil
}
