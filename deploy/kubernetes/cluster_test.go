package kubernetes

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"switchyard/internal/kubetest"
	"switchyard/router/server"
)

func TestMain(m *testing.M) {
	code := m.Run()
	kubetest.Stop()
	os.Exit(code)
}

const fieldManager = "switchyard-deploy-test"

// cluster is the envtest API server, as its admin.
type cluster struct {
	cs     *kubernetes.Clientset
	dyn    *dynamic.DynamicClient
	mapper meta.RESTMapper
}

// newCluster starts (or reuses) the API server with Dynamo's CRD installed
// for real, as on a cluster running the Dynamo operator.
func newCluster(t *testing.T) cluster {
	t.Helper()
	kubetest.InstallCRDs(t, "crds")
	cfg := kubetest.Config(t)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	return cluster{cs: cs, dyn: dyn, mapper: mapper}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// resource is the dynamic client for the object's kind in its namespace.
func (c cluster) resource(t *testing.T, u *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	gvk := u.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	require.NoError(t, err, "the API server serves %s", gvk)
	require.Equal(t, meta.RESTScopeNameNamespace, m.Scope.Name(), "%s is namespaced", gvk)
	return c.dyn.Resource(m.Resource).Namespace(u.GetNamespace())
}

// apply applies the object server-side, for real or as a dry run.
func (c cluster) apply(t *testing.T, u *unstructured.Unstructured, dryRun bool) *unstructured.Unstructured {
	t.Helper()
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	out, err := c.resource(t, u).Apply(ctxFor(t), u.GetName(), u, opts)
	require.NoError(t, err, "apply %s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
	return out
}

// ensureNamespace creates the namespace for real, as an operator would
// before `kubectl apply -k`.
func (c cluster) ensureNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := c.cs.CoreV1().Namespaces().Create(ctxFor(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// Every object each overlay renders is accepted by a real API server
// (schema, defaulting, admission) through server-side apply, as a dry run
// that leaves nothing behind.
func TestOverlaysApplyDryRun(t *testing.T) {
	c := newCluster(t)
	for _, o := range overlays {
		t.Run(o.name, func(t *testing.T) {
			r := render(t, o.name)
			c.ensureNamespace(t, r.byKind["Deployment"].GetNamespace())
			for _, u := range r.all {
				out := c.apply(t, u, true)
				require.Equal(t, u.GetKind(), out.GetKind())
				_, err := c.resource(t, u).Get(ctxFor(t), u.GetName(), metav1.GetOptions{})
				require.True(t, apierrors.IsNotFound(err), "a dry run created %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		})
	}
}

var (
	readVerbs  = []string{"get", "list", "watch"}
	writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}
)

// Each overlay's ServiceAccount, Role and RoleBinding, created for real in
// a fresh namespace, let the router's ServiceAccount get, list and watch
// exactly what its source reads there, and nothing else: no write verb on
// those resources, no read of the other source's resources, of Secrets or
// of ConfigMaps, and no read outside the namespace. The API server
// authorizes with RBAC, so a SubjectAccessReview answers as it would for
// the router's own requests.
func TestOverlaysLeastPrivilege(t *testing.T) {
	c := newCluster(t)
	for _, o := range overlays {
		t.Run(o.name, func(t *testing.T) {
			ns := kubetest.Namespace(t)
			r := render(t, o.name)
			sa := r.byKind["ServiceAccount"]
			user := serviceAccountUser(ns, sa.GetName())
			check := func(namespace, verb string, a access, want bool) {
				t.Helper()
				got := c.allowed(t, ns, user, namespace, verb, a)
				require.Equal(t, want, got, "%s %s %s in %q", verb, a.resource, a.group, namespace)
			}

			for _, kind := range []string{"ServiceAccount", "Role"} {
				c.apply(t, moveTo(r.byKind[kind], r.byKind[kind].GetNamespace(), ns), false)
			}
			// Nothing is granted until the binding exists: the review is not
			// answering yes to everyone.
			check(ns, "list", o.reads[0], false)
			c.apply(t, moveTo(r.byKind["RoleBinding"], r.byKind["RoleBinding"].GetNamespace(), ns), false)
			c.awaitGrant(t, ns, user, o.reads[0])

			for _, a := range o.reads {
				for _, v := range readVerbs {
					check(ns, v, a, true)
				}
				for _, v := range writeVerbs {
					check(ns, v, a, false)
				}
				check("default", "list", a, false)
				check("", "list", a, false) // cluster-wide
			}
			for _, a := range o.denied {
				for _, v := range append(readVerbs, writeVerbs...) {
					check(ns, v, a, false)
				}
			}
		})
	}
}

// awaitGrant waits until the API server's authorizer has seen a new
// RoleBinding: its RBAC rules are read from an informer cache, so a
// review right after the create may still answer from before it.
func (c cluster) awaitGrant(t *testing.T, ns, user string, a access) {
	t.Helper()
	require.Eventually(t, func() bool { return c.allowed(t, ns, user, ns, "list", a) },
		30*time.Second, 20*time.Millisecond, "the RoleBinding never took effect for list %s", a.resource)
}

// serviceAccountUser is the user name a ServiceAccount's token
// authenticates as.
func serviceAccountUser(ns, name string) string {
	return "system:serviceaccount:" + ns + ":" + name
}

// allowed asks the API server, as its admin, whether the ServiceAccount
// (with the groups every ServiceAccount token carries) may do verb on the
// resource in namespace ("" is cluster-wide).
func (c cluster) allowed(t *testing.T, saNamespace, user, namespace, verb string, a access) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + saNamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: verb, Group: a.group, Resource: a.resource,
		},
	}}
	out, err := c.cs.AuthorizationV1().SubjectAccessReviews().Create(ctxFor(t), sar, metav1.CreateOptions{})
	require.NoError(t, err)
	return out.Status.Allowed
}

// moveTo copies a rendered object into another namespace, along with the
// ServiceAccount subjects of a binding that named the old one.
func moveTo(u *unstructured.Unstructured, from, to string) *unstructured.Unstructured {
	out := u.DeepCopy()
	out.SetNamespace(to)
	subjects, found, _ := unstructured.NestedSlice(out.Object, "subjects")
	if !found {
		return out
	}
	for _, s := range subjects {
		if m := s.(map[string]any); m["kind"] == "ServiceAccount" && m["namespace"] == from {
			m["namespace"] = to
		}
	}
	_ = unstructured.SetNestedSlice(out.Object, subjects, "subjects")
	return out
}

// The router runs each overlay's very configuration as the overlay's
// ServiceAccount against the real API server: its source lists and watches
// with nothing more than the overlay's Role (discovery connects), /health
// answers 200 and /ready 503, since the namespace holds no workers.
func TestOverlaysRouterDiscoversWithItsRole(t *testing.T) {
	c := newCluster(t)
	for _, o := range overlays {
		t.Run(o.name, func(t *testing.T) {
			ns := kubetest.Namespace(t)
			r := render(t, o.name)
			from := r.byKind["Role"].GetNamespace()
			for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding"} {
				c.apply(t, moveTo(r.byKind[kind], from, ns), false)
			}
			// Authenticated by a client certificate whose name is the
			// ServiceAccount's user name: RBAC matches ServiceAccount
			// subjects by that name, so the router holds exactly the
			// overlay's grants (a token would need the kubelet).
			user := kubetest.User(t, serviceAccountUser(ns, r.byKind["ServiceAccount"].GetName()))
			t.Setenv("KUBECONFIG", writeKubeconfig(t, user))

			cfg := r.routerConfig(t, noEnv)
			cfg.Dynamo.Discovery.Kubernetes.Namespace = ns
			cfg.Server.BindAddress = "127.0.0.1:0"
			srv, err := server.New(cfg, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			defer srv.Close()
			base := "http://" + srv.Addr()

			// A whole line: the metric's HELP text also starts with "1".
			const connected = "\nswitchyard_dynamo_discovery_connected 1\n"
			require.Eventually(t, func() bool { return strings.Contains(body(t, base+"/metrics"), connected) },
				30*time.Second, 50*time.Millisecond, "discovery never connected with the overlay's Role")
			require.Equal(t, http.StatusOK, status(t, base+"/health"))
			require.Equal(t, http.StatusServiceUnavailable, status(t, base+"/ready"))
		})
	}
}

// writeKubeconfig writes a kubeconfig file for the REST config, the way
// the router finds its API server outside a cluster.
func writeKubeconfig(t *testing.T, rc *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	kc.AuthInfos["router"] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "router"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}

func body(t *testing.T, url string) string {
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func status(t *testing.T, url string) int {
	resp, err := http.Get(url)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}
