// Package kubetest runs a real Kubernetes API server (kube-apiserver and
// etcd, through controller-runtime's envtest) for tests.
//
// Kubernetes discovery is tested against the real server because what
// matters (label selection, paging with continue tokens, watch timeouts
// and resourceVersions, status subresources, graceful deletion) lives in
// the API server. The binaries come from KUBEBUILDER_ASSETS, which `make
// test` points at the folder hack/envtest/build.sh fills (`make
// envtest-assets`). A missing folder fails the test rather than skipping
// it: a skipped suite would pass CI without testing anything.
package kubetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// startTimeout is how long the control plane may take to come up on a
// loaded machine.
const startTimeout = "120s"

var (
	mu      sync.Mutex
	env     *envtest.Environment
	restCfg *rest.Config
	nsSeq   int
)

// Config returns the admin REST config of the package's API server,
// starting it on first use. Call Stop from TestMain after m.Run.
func Config(t testing.TB) *rest.Config {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if restCfg != nil {
		return rest.CopyConfig(restCfg)
	}
	if err := checkAssets(); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		_ = os.Setenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT", startTimeout)
	}
	e := &envtest.Environment{}
	cfg, err := e.Start()
	if err != nil {
		t.Fatalf("kubetest: start the API server: %v", err)
	}
	env, restCfg = e, cfg
	return rest.CopyConfig(cfg)
}

// checkAssets fails with the way to get the binaries when they are missing.
func checkAssets() error {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return fmt.Errorf("kubetest: KUBEBUILDER_ASSETS is not set; run `make envtest-assets` and " +
			"KUBEBUILDER_ASSETS=$(hack/envtest/build.sh --dir), or run the tests through `make test`")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return fmt.Errorf("kubetest: %s is missing from KUBEBUILDER_ASSETS=%s; run `make envtest-assets`", bin, dir)
		}
	}
	return nil
}

// Stop shuts the API server down if it was started.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	if env != nil {
		_ = env.Stop()
		env, restCfg = nil, nil
	}
}

// Client returns an admin clientset; tests use it to write the objects
// the code under test only reads.
func Client(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(Config(t))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Namespace creates a fresh namespace for one test and deletes it when the
// test ends.
func Namespace(t testing.TB) string {
	t.Helper()
	cs := Client(t)
	mu.Lock()
	nsSeq++
	name := fmt.Sprintf("test-%d", nsSeq)
	mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// Kubeconfig writes a kubeconfig file that reaches the API server as its
// admin, for code that finds its server the way it does outside a cluster.
func Kubeconfig(t testing.TB) string {
	t.Helper()
	rc := Config(t)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData, Token: rc.BearerToken,
	}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// User returns a REST config that authenticates as a new user with the
// given name and no permissions beyond what RBAC objects grant it.
func User(t testing.TB, name string) *rest.Config {
	t.Helper()
	Config(t)
	mu.Lock()
	defer mu.Unlock()
	u, err := env.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatalf("kubetest: add user %s: %v", name, err)
	}
	return u.Config()
}

// InstallCRDs installs the CustomResourceDefinitions in the given files or
// folders and waits until the API server serves them. Installing the same
// definition again is harmless.
func InstallCRDs(t testing.TB, paths ...string) {
	t.Helper()
	_, err := envtest.InstallCRDs(Config(t), envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true})
	if err != nil {
		t.Fatalf("kubetest: install CRDs: %v", err)
	}
}

// ModuleFile is the path of a file inside a Go module at an exact version,
// downloaded through the module proxy when missing (`go mod download`).
// Tests take third-party CRDs (the Gateway API's, the Inference
// Extension's) from their modules this way instead of copying them into
// the repository.
func ModuleFile(t testing.TB, moduleAtVersion, file string) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", moduleAtVersion).Output()
	if err != nil {
		t.Fatalf("kubetest: go mod download %s (needs the Go module proxy): %v", moduleAtVersion, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		t.Fatalf("kubetest: go mod download %s: %s %v", moduleAtVersion, m.Error, err)
	}
	return filepath.Join(m.Dir, file)
}
