// Package kubernetes holds the router's Kubernetes manifests: a Kustomize
// base and one overlay per Kubernetes discovery source. Its tests render
// the overlays with Kustomize and check them against the router itself and
// against a real API server.
package kubernetes

import (
	"net"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"switchyard/router/config"
)

// configFile is the key of the router's configuration in its ConfigMap.
const configFile = "switchyard.yaml"

// access names one resource a ServiceAccount may or may not read.
type access struct{ group, resource string }

var (
	pods           = access{"", "pods"}
	workerMetadata = access{"nvidia.com", "dynamoworkermetadatas"}
	endpointSlices = access{"discovery.k8s.io", "endpointslices"}
	secrets        = access{"", "secrets"}
	configMaps     = access{"", "configmaps"}
)

// overlay is one shipped overlay and what its discovery source must be
// able to read: exactly reads, and none of denied.
type overlay struct {
	name   string
	source string
	reads  []access
	denied []access
}

// The router needs no Secret or ConfigMap through the API: its file is a
// mounted volume and its admin token an environment variable the kubelet
// fills.
var overlays = []overlay{
	{
		name:   "dynamo-pod-discovery",
		source: config.SourceKubernetesPods,
		reads:  []access{pods},
		denied: []access{workerMetadata, endpointSlices, secrets, configMaps},
	},
	{
		name:   "dynamo-metadata-discovery",
		source: config.SourceKubernetes,
		reads:  []access{workerMetadata, endpointSlices},
		denied: []access{pods, secrets, configMaps},
	},
}

// rendered is an overlay's output from Kustomize: every object, the
// router's own (labelled app.kubernetes.io/name: switchyard) by kind, each
// kind once, and the others an overlay ships beside it (an example engine)
// by kind and name.
type rendered struct {
	all    []*unstructured.Unstructured
	byKind map[string]*unstructured.Unstructured
	others map[string]*unstructured.Unstructured
}

// routerLabel marks the router's own objects.
const routerLabel = "app.kubernetes.io/name"

// other is an object the overlay ships beside the router's, by kind and name.
func (r rendered) other(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	u, ok := r.others[kind+"/"+name]
	require.True(t, ok, "the overlay renders %s %s", kind, name)
	return u
}

// render builds the overlay as `kubectl apply -k` would, with the
// Kustomize library on the files on disk.
func render(t *testing.T, name string) rendered {
	t.Helper()
	out := rendered{byKind: map[string]*unstructured.Unstructured{}, others: map[string]*unstructured.Unstructured{}}
	for _, u := range build(t, name) {
		out.all = append(out.all, u)
		if u.GetLabels()[routerLabel] != "switchyard" {
			key := u.GetKind() + "/" + u.GetName()
			require.NotContains(t, out.others, key, "overlays/%s renders %s twice", name, key)
			out.others[key] = u
			continue
		}
		require.NotContains(t, out.byKind, u.GetKind(), "overlays/%s renders two %s objects of the router", name, u.GetKind())
		out.byKind[u.GetKind()] = u
	}
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service"} {
		require.Contains(t, out.byKind, kind, "overlays/%s", name)
	}
	return out
}

// build renders the overlay's objects as `kubectl apply -k` would, with
// the Kustomize library on the files on disk.
func build(t *testing.T, name string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join("overlays", name))
	require.NoError(t, err, "kustomize build overlays/%s", name)
	var all []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		// Through JSON, so that numbers are the int64 and float64 the
		// Kubernetes clients expect.
		b, err := r.MarshalJSON()
		require.NoError(t, err)
		u := &unstructured.Unstructured{}
		require.NoError(t, u.UnmarshalJSON(b))
		all = append(all, u)
	}
	return all
}

// routerConfig parses and validates the rendered ConfigMap's file with the
// router's own loader; lookup resolves its ${VAR} references.
func (r rendered) routerConfig(t *testing.T, lookup func(string) (string, bool)) *config.Config {
	t.Helper()
	cfg := r.parseConfig(t, lookup)
	errs, _ := cfg.Validate()
	require.Empty(t, errs)
	return cfg
}

// parseConfig parses the rendered ConfigMap's file with the router's own
// loader, without validating it: a file that needs the Deployment's DYN_*
// variables laid over it first.
func (r rendered) parseConfig(t *testing.T, lookup func(string) (string, bool)) *config.Config {
	t.Helper()
	content, found, err := unstructured.NestedString(r.byKind["ConfigMap"].Object, "data", configFile)
	require.NoError(t, err)
	require.True(t, found, "the ConfigMap holds %s", configFile)
	cfg, err := config.Parse([]byte(content), lookup)
	require.NoError(t, err)
	return cfg
}

func noEnv(string) (string, bool) { return "", false }

// Each overlay renders; its configuration validates and names the overlay's
// source and namespace; every object lands in that namespace; the
// Deployment runs as the ServiceAccount the RoleBinding binds to the Role,
// mounts the ConfigMap whole where its args read the file, and its probes
// and Service name the port the router binds.
func TestOverlaysRender(t *testing.T) {
	for _, o := range overlays {
		t.Run(o.name, func(t *testing.T) {
			r := render(t, o.name)
			cfg := r.routerConfig(t, noEnv)
			require.Equal(t, o.source, cfg.Dynamo.Discovery.Source)
			ns := cfg.Dynamo.Discovery.Kubernetes.Namespace
			require.NotEmpty(t, ns)
			for _, u := range r.all {
				require.Equal(t, ns, u.GetNamespace(), "%s %s sits in the fleet's namespace", u.GetKind(), u.GetName())
			}
			checkBinding(t, r)
			checkDeployment(t, r, cfg)
		})
	}
}

// checkBinding: the RoleBinding gives the Role to the router's
// ServiceAccount, the one the Deployment runs as.
func checkBinding(t *testing.T, r rendered) {
	t.Helper()
	sa, role, binding := r.byKind["ServiceAccount"], r.byKind["Role"], r.byKind["RoleBinding"]
	ref, _, _ := unstructured.NestedStringMap(binding.Object, "roleRef")
	require.Equal(t, map[string]string{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role.GetName()}, ref)
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	require.Equal(t, []any{map[string]any{"kind": "ServiceAccount", "name": sa.GetName(), "namespace": sa.GetNamespace()}}, subjects)
	runAs, _, _ := unstructured.NestedString(r.byKind["Deployment"].Object, "spec", "template", "spec", "serviceAccountName")
	require.Equal(t, sa.GetName(), runAs)
}

func checkDeployment(t *testing.T, r rendered, cfg *config.Config) {
	t.Helper()
	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Args  []string `json:"args"`
						Ports []struct {
							Name          string `json:"name"`
							ContainerPort int    `json:"containerPort"`
						} `json:"ports"`
						ReadinessProbe probe `json:"readinessProbe"`
						LivenessProbe  probe `json:"livenessProbe"`
						VolumeMounts   []struct {
							Name      string `json:"name"`
							MountPath string `json:"mountPath"`
							SubPath   string `json:"subPath"`
						} `json:"volumeMounts"`
					} `json:"containers"`
					Volumes []struct {
						Name      string `json:"name"`
						ConfigMap struct {
							Name string `json:"name"`
						} `json:"configMap"`
					} `json:"volumes"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	require.NoError(t, convert(r.byKind["Deployment"], &dep))
	spec := dep.Spec.Template.Spec
	require.Len(t, spec.Containers, 1)
	c := spec.Containers[0]
	require.Len(t, spec.Volumes, 1)
	require.Equal(t, r.byKind["ConfigMap"].GetName(), spec.Volumes[0].ConfigMap.Name)
	require.Len(t, c.VolumeMounts, 1)
	mount := c.VolumeMounts[0]
	require.Equal(t, spec.Volumes[0].Name, mount.Name)
	require.Empty(t, mount.SubPath, "a subPath mount never sees ConfigMap edits: no hot reload")
	require.Contains(t, c.Args, mount.MountPath+"/"+configFile)

	require.Len(t, c.Ports, 1)
	_, port, err := net.SplitHostPort(cfg.Server.BindAddress)
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(c.Ports[0].ContainerPort), port, "the container port is the one the router binds")
	require.Equal(t, c.Ports[0].Name, c.ReadinessProbe.HTTPGet.Port)
	require.Equal(t, c.Ports[0].Name, c.LivenessProbe.HTTPGet.Port)
	require.Equal(t, "/ready", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/health", c.LivenessProbe.HTTPGet.Path)
	target, _, _ := unstructured.NestedSlice(r.byKind["Service"].Object, "spec", "ports")
	require.Len(t, target, 1)
	require.Equal(t, c.Ports[0].Name, target[0].(map[string]any)["targetPort"])
}

type probe struct {
	HTTPGet struct {
		Path string `json:"path"`
		Port string `json:"port"`
	} `json:"httpGet"`
}

// convert decodes a rendered object into a typed view of the fields a test reads.
func convert(u *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}
