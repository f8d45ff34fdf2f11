package job

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// WorkDir is the cells' working folder: a relative input path in the command is read from
// here, so the Pod finds it where the command names it.
const WorkDir = "/inputs"

// MaxConfigMapBytes caps the files carried in the inputs ConfigMap. The API server refuses an
// object over 1 MiB; the rest is left for its names and metadata.
const MaxConfigMapBytes = 1<<20 - 16<<10

// maxInputs caps the files one Job carries or mounts.
const maxInputs = 256

// Input is one file a cell reads.
type Input struct {
	// Path is the file as the cell's command names it: absolute, or relative to WorkDir.
	Path string
	// Source is where the file is read from here to carry it into the ConfigMap; "" for a
	// file read from the inputs claim.
	Source string
	// Large marks workload data (a trace, a recording): read from the inputs claim when one
	// is given, carried in the ConfigMap otherwise.
	Large bool
	// What names the input for people: "--trace", "workload.trace.path of sc.yaml".
	What string
}

// podPath is where the Pod reads the input.
func (in Input) podPath() string {
	if path.IsAbs(in.Path) {
		return path.Clean(in.Path)
	}
	return path.Join(WorkDir, in.Path)
}

// fromClaim says whether the Pod reads the input from the inputs claim.
func (s Spec) fromClaim(in Input) bool { return in.Large && s.InputsClaim != "" }

// claimPath is where the input is on the inputs claim: at the path the command names it,
// relative ones as they are and absolute ones without their leading slash.
func claimPath(in Input) string {
	return strings.TrimPrefix(path.Clean(in.Path), "/")
}

// configMapName is the inputs ConfigMap's name.
func (s Spec) configMapName() string { return s.Name + "-inputs" }

var keyUnsafe = regexp.MustCompile(`[^-._a-zA-Z0-9]+`)

// key is the ConfigMap key of the i-th carried input: its number, then its file name.
func key(i int, in Input) string {
	k := fmt.Sprintf("%02d-%s", i, keyUnsafe.ReplaceAllString(path.Base(in.Path), "_"))
	return k[:min(len(k), validation.DNS1123SubdomainMaxLength)]
}

// checkInputs refuses inputs the Pod cannot be given: paths that land on its own folders,
// two files at one path, a claim path outside the claim.
func (s Spec) checkInputs() error {
	var errs []error
	if len(s.Inputs) > maxInputs {
		return fmt.Errorf("%d input files: at most %d", len(s.Inputs), maxInputs)
	}
	if s.InputsClaim != "" {
		for _, e := range validation.IsDNS1123Subdomain(s.InputsClaim) {
			errs = append(errs, fmt.Errorf("--inputs-claim %q: %s", s.InputsClaim, e))
		}
	}
	seen := map[string]Input{}
	for _, in := range s.Inputs {
		p := in.podPath()
		switch {
		case in.Path == "" || strings.ContainsAny(in.Path, ":\x00"):
			errs = append(errs, fmt.Errorf("%s %q: not a path a Pod can mount a file at", in.What, in.Path))
			continue
		case p == "/" || p == WorkDir || p == "/tmp" || p == ResultsDir || strings.HasPrefix(p, ResultsDir+"/"):
			errs = append(errs, fmt.Errorf("%s %s: the Pod reads it at %s, one of the Job's own folders (/, %s, /tmp, %s)", in.What, in.Path, p, WorkDir, ResultsDir))
			continue
		case s.fromClaim(in) && (claimPath(in) == ".." || strings.HasPrefix(claimPath(in), "../")):
			errs = append(errs, fmt.Errorf("%s %s: with --inputs-claim, a relative path may not leave the working folder: give it as an absolute path", in.What, in.Path))
			continue
		case !s.fromClaim(in) && in.Source == "":
			errs = append(errs, fmt.Errorf("%s %s: no file to carry into the Job", in.What, in.Path))
			continue
		}
		if prev, ok := seen[p]; ok {
			if prev.Source != in.Source || s.fromClaim(prev) != s.fromClaim(in) {
				errs = append(errs, fmt.Errorf("%s %s and %s %s are both read at %s in the Pod", prev.What, prev.Path, in.What, in.Path, p))
			}
			continue
		}
		seen[p] = in
	}
	return errors.Join(errs...)
}

// mounts are the inputs as the Pod sees them: each file mounted read-only at its path, from
// the ConfigMap or the inputs claim, in the order given, each path once.
func (s Spec) mounts() (carried []Input, mounts []corev1.VolumeMount) {
	seen := map[string]bool{}
	for _, in := range s.Inputs {
		p := in.podPath()
		if seen[p] {
			continue
		}
		seen[p] = true
		if s.fromClaim(in) {
			mounts = append(mounts, corev1.VolumeMount{Name: "inputs-claim", MountPath: p, SubPath: claimPath(in), ReadOnly: true})
			continue
		}
		mounts = append(mounts, corev1.VolumeMount{Name: "inputs", MountPath: p, SubPath: key(len(carried), in), ReadOnly: true})
		carried = append(carried, in)
	}
	return carried, mounts
}

// relative says whether any input is named by a relative path: the Pod then works in WorkDir.
func (s Spec) relative() bool {
	return slices.ContainsFunc(s.Inputs, func(in Input) bool { return !path.IsAbs(in.Path) })
}

// ConfigMap is the ConfigMap that carries the inputs not read from the claim, or nil when
// there are none. Files are read here, their sizes checked before their contents: past
// MaxConfigMapBytes in all it refuses, naming the files, and says to use --inputs-claim.
func (s Spec) ConfigMap() (*corev1.ConfigMap, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	carried, _ := s.mounts()
	if len(carried) == 0 {
		return nil, nil
	}
	total := int64(0)
	var sizes []string
	for _, in := range carried {
		fi, err := os.Stat(in.Source)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", in.What, in.Path, err)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s %s: %s is not a regular file", in.What, in.Path, in.Source)
		}
		total += fi.Size()
		sizes = append(sizes, fmt.Sprintf("%s %s (%d bytes)", in.What, in.Path, fi.Size()))
	}
	if total > MaxConfigMapBytes {
		return nil, fmt.Errorf("the inputs come to %d bytes, more than a ConfigMap carries (%d): %s. Put the traces and recordings on a PersistentVolumeClaim and give --inputs-claim NAME",
			total, MaxConfigMapBytes, strings.Join(sizes, ", "))
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: s.configMapName(), Namespace: s.Namespace, Labels: s.labels()},
	}
	read := int64(0)
	for i, in := range carried {
		body, err := readCapped(in.Source, MaxConfigMapBytes-read)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", in.What, in.Path, err)
		}
		read += int64(len(body))
		k := key(i, in)
		if utf8.Valid(body) {
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data[k] = string(body)
		} else {
			if cm.BinaryData == nil {
				cm.BinaryData = map[string][]byte{}
			}
			cm.BinaryData[k] = body
		}
	}
	return cm, nil
}

// readCapped reads a file of at most limit bytes: one that grew past it since it was
// measured is refused, not read whole.
func readCapped(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	body, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > limit {
		return nil, errors.New("grew while the inputs were read: more than a ConfigMap carries")
	}
	return body, nil
}
