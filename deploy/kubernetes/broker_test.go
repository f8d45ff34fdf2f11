package kubernetes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"switchyard/internal/kubetest"
	"switchyard/internal/testpki"
	"switchyard/router/bus/broker"
	"switchyard/router/config"
	"switchyard/router/server"
)

const (
	brokerOverlay = "event-broker"
	// brokerRouterFile is the example configuration of the router outside
	// the cluster.
	brokerRouterFile = "router-switchyard.yaml"
)

// agent is one in-cluster agent the event-broker overlay ships: the
// app.kubernetes.io/name of its objects, the switchyard command its
// Deployment runs, and its token Secret's template, applied by hand.
type agent struct {
	name, command, secretFile string
}

var (
	brokerAgent     = agent{name: "switchyard-broker", command: "broker", secretFile: "secret.yaml"}
	kvListenerAgent = agent{name: "switchyard-kv-listener", command: "kv-listener", secretFile: "kv-listener-secret.yaml"}
	agents          = []agent{brokerAgent, kvListenerAgent}
)

var services = access{"", "services"}

// brokerManifests is one agent of the event-broker overlay: the objects
// Kustomize renders for it (each kind once) and its Secret template.
type brokerManifests struct {
	agent  agent
	all    []*unstructured.Unstructured
	byKind map[string]*unstructured.Unstructured
	secret *unstructured.Unstructured
	dep    appsv1.Deployment
}

func renderBroker(t *testing.T) brokerManifests { return renderAgent(t, brokerAgent) }

// renderAgent builds the overlay and keeps the agent's objects. Every
// object belongs to one of the agents.
func renderAgent(t *testing.T, a agent) brokerManifests {
	t.Helper()
	m := brokerManifests{agent: a, byKind: map[string]*unstructured.Unstructured{}}
	for _, u := range build(t, brokerOverlay) {
		owner := u.GetLabels()[routerLabel]
		require.True(t, owner == brokerAgent.name || owner == kvListenerAgent.name, "%s %s is labelled as one agent's, not %q", u.GetKind(), u.GetName(), owner)
		if owner != a.name {
			continue
		}
		require.NotContains(t, m.byKind, u.GetKind(), "the overlay renders two %s objects of %s", u.GetKind(), a.name)
		m.byKind[u.GetKind()] = u
		m.all = append(m.all, u)
	}
	// Exactly these: no Service (nothing dials an agent), and no Secret,
	// so that re-applying the overlay never overwrites a real token.
	kinds := []string{"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment"}
	require.Len(t, m.byKind, len(kinds), "%s", a.name)
	for _, kind := range kinds {
		require.Contains(t, m.byKind, kind, "%s", a.name)
	}
	require.NoError(t, convert(m.byKind["Deployment"], &m.dep))
	require.Len(t, m.dep.Spec.Template.Spec.Containers, 1)

	f, err := os.Open(filepath.Join("overlays", brokerOverlay, a.secretFile))
	require.NoError(t, err)
	defer f.Close()
	m.secret = &unstructured.Unstructured{}
	require.NoError(t, utilyaml.NewYAMLOrJSONDecoder(f, 4096).Decode(&m.secret.Object))
	require.Equal(t, "Secret", m.secret.GetKind())
	require.Equal(t, a.name, m.secret.GetLabels()[routerLabel])
	return m
}

func (m brokerManifests) container() corev1.Container { return m.dep.Spec.Template.Spec.Containers[0] }

// flags reads the container's `switchyard <command>` arguments, every one
// written --name=value.
func (m brokerManifests) flags(t *testing.T) map[string][]string {
	t.Helper()
	args := m.container().Args
	require.Equal(t, m.agent.command, args[0])
	out := map[string][]string{}
	for _, a := range args[1:] {
		name, value, ok := strings.Cut(a, "=")
		require.True(t, ok && strings.HasPrefix(name, "--"), "argument %q is --name=value", a)
		out[strings.TrimPrefix(name, "--")] = append(out[strings.TrimPrefix(name, "--")], value)
	}
	return out
}

// flag is a flag given once.
func flag(t *testing.T, flags map[string][]string, name string) string {
	t.Helper()
	require.Len(t, flags[name], 1, "--%s given once", name)
	return flags[name][0]
}

// mountOf is the volume mounted whole at the file's folder.
func (m brokerManifests) mountOf(t *testing.T, file string) corev1.Volume {
	t.Helper()
	for _, vm := range m.container().VolumeMounts {
		if vm.MountPath != path.Dir(file) {
			continue
		}
		require.Empty(t, vm.SubPath, "a subPath mount is a copy taken at start")
		require.True(t, vm.ReadOnly)
		for _, v := range m.dep.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name {
				return v
			}
		}
		t.Fatalf("no volume %s", vm.Name)
	}
	t.Fatalf("nothing is mounted at %s", path.Dir(file))
	return corev1.Volume{}
}

// secretToken is the template's token, as the kubelet writes it into the
// mounted file.
func (m brokerManifests) secretToken(t *testing.T, key string) string {
	t.Helper()
	token, found, err := unstructured.NestedString(m.secret.Object, "stringData", key)
	require.NoError(t, err)
	require.True(t, found, "the Secret template holds %s", key)
	return token
}

// routerExample parses the router's example configuration with the
// router's own loader.
func routerExample(t *testing.T) *config.Config {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("overlays", brokerOverlay, brokerRouterFile))
	require.NoError(t, err)
	cfg, err := config.Parse(b, noEnv)
	require.NoError(t, err)
	return cfg
}

// tokenHash is a brokers[].token_hash as the Secret template's comment
// computes it: printf %s "$TOKEN" | sha256sum.
func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// entryOf is the router's brokers[] entry whose id is the agent's
// --client-id.
func entryOf(t *testing.T, cfg *config.Config, m brokerManifests) *config.BusClient {
	t.Helper()
	id := flag(t, m.flags(t), "client-id")
	for i := range cfg.Dynamo.EventBus.Brokers {
		if cfg.Dynamo.EventBus.Brokers[i].ID == id {
			return &cfg.Dynamo.EventBus.Brokers[i]
		}
	}
	t.Fatalf("the router's example has no brokers[] entry %q", id)
	return nil
}

// The router's example configuration validates with the router's rules,
// sends load and KV subscriptions through a broker, and holds one entry
// per agent, the broker's agreeing with its Deployment: the client id, the
// namespaces served (its allowlist, and the workers' namespace the router
// discovers), the listener's port. Its placeholder hash matches no token
// (not the Secret template's placeholder either); the template's token
// hashed as documented is a valid entry.
func TestBrokerRouterExample(t *testing.T) {
	m := renderBroker(t)
	flags := m.flags(t)
	cfg := routerExample(t)
	errs, _ := cfg.Validate()
	require.Empty(t, errs)

	require.Equal(t, config.TransportBroker, cfg.Dynamo.Load.Transport)
	bus := cfg.Dynamo.EventBus
	require.True(t, bus.Enabled)
	require.Len(t, bus.Brokers, len(agents), "one entry per agent")
	e := entryOf(t, cfg, m)
	require.Equal(t, config.BusRoleBroker, e.Role)
	require.Equal(t, flags["namespace"], e.Namespaces)
	require.Equal(t, []string{cfg.Dynamo.Discovery.Kubernetes.DynamoNamespace}, flags["namespace"])
	require.Equal(t, m.byKind["Deployment"].GetNamespace(), cfg.Dynamo.Discovery.Kubernetes.Namespace)

	u, err := url.Parse(flag(t, flags, "bus-url"))
	require.NoError(t, err)
	require.Equal(t, "https", u.Scheme)
	require.Equal(t, u.Port(), portOf(t, bus.Listen), "--bus-url reaches dynamo.event_bus.listen")

	token := m.secretToken(t, path.Base(flag(t, flags, "token-file")))
	require.NotEqual(t, tokenHash(token), e.TokenHash, "the placeholders must not pair up into a working credential")
	e.TokenHash = tokenHash(token)
	errs, _ = cfg.Validate()
	require.Empty(t, errs)
}

func portOf(t *testing.T, hostPort string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(hostPort)
	require.NoError(t, err)
	return p
}

// The overlay renders one consistent broker: its ServiceAccount bound to
// its Role; one replica replaced by Recreate (one session per client id);
// `switchyard broker` reading DynamoWorkerMetadata in its own namespace
// (the downward API's POD_NAMESPACE, where the Role grants), its token
// from the Secret template's key mounted whole, the CA bundle from the
// generated ConfigMap; probes on the metrics port it binds; a grace period
// longer than the drain's bounded waits; non-root, read-only, no
// escalation, no capabilities, and resource requests.
func TestBrokerOverlayRenders(t *testing.T) {
	checkAgentRenders(t, renderBroker(t))
}

// checkAgentRenders holds what every agent's objects must be (see
// TestBrokerOverlayRenders).
func checkAgentRenders(t *testing.T, m brokerManifests) {
	t.Helper()
	ns := routerExample(t).Dynamo.Discovery.Kubernetes.Namespace
	for _, u := range m.all {
		require.Equal(t, ns, u.GetNamespace(), "%s %s sits in the fleet's namespace", u.GetKind(), u.GetName())
	}
	require.Empty(t, m.secret.GetNamespace(), "the Secret template takes its namespace from `kubectl -n`")
	sa, role, binding := m.byKind["ServiceAccount"], m.byKind["Role"], m.byKind["RoleBinding"]
	ref, _, _ := unstructured.NestedStringMap(binding.Object, "roleRef")
	require.Equal(t, map[string]string{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role.GetName()}, ref)
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	require.Equal(t, []any{map[string]any{"kind": "ServiceAccount", "name": sa.GetName(), "namespace": sa.GetNamespace()}}, subjects)

	spec := m.dep.Spec
	pod := spec.Template.Spec
	require.Equal(t, sa.GetName(), pod.ServiceAccountName)
	require.Equal(t, int32(1), *spec.Replicas)
	require.Equal(t, appsv1.RecreateDeploymentStrategyType, spec.Strategy.Type)
	require.Equal(t, map[string]string{routerLabel: m.agent.name}, spec.Selector.MatchLabels)

	c := m.container()
	flags := m.flags(t)
	require.Equal(t, config.SourceKubernetes, flag(t, flags, "discovery"))
	require.NotContains(t, flags, "kube-namespace", "the agent reads its own namespace, where its Role grants")
	require.NotContains(t, flags, "token-env", "the token comes from the mounted Secret")
	var podNamespace *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "POD_NAMESPACE" {
			podNamespace = &c.Env[i]
		}
	}
	require.NotNil(t, podNamespace)
	require.Equal(t, "metadata.namespace", podNamespace.ValueFrom.FieldRef.FieldPath)

	tokenFile := flag(t, flags, "token-file")
	tokenVol := m.mountOf(t, tokenFile)
	require.NotNil(t, tokenVol.Secret)
	require.Equal(t, m.secret.GetName(), tokenVol.Secret.SecretName)
	m.secretToken(t, path.Base(tokenFile))

	caFile := flag(t, flags, "ca-file")
	caVol := m.mountOf(t, caFile)
	require.NotNil(t, caVol.ConfigMap)
	cm := m.byKind["ConfigMap"]
	require.Equal(t, cm.GetName(), caVol.ConfigMap.Name, "the Deployment mounts its own generated, hashed ConfigMap")
	_, found, _ := unstructured.NestedString(cm.Object, "data", path.Base(caFile))
	require.True(t, found, "the ConfigMap holds %s", path.Base(caFile))

	require.Len(t, c.Ports, 1)
	require.Equal(t, "metrics", c.Ports[0].Name)
	require.Equal(t, portOf(t, flag(t, flags, "metrics-listen")), strconv.Itoa(int(c.Ports[0].ContainerPort)))
	require.Equal(t, "/ready", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/health", c.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "metrics", c.ReadinessProbe.HTTPGet.Port.String())
	require.Equal(t, "metrics", c.LivenessProbe.HTTPGet.Port.String())

	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	require.Greater(t, grace, 2*broker.DrainTimeout, "SIGTERM's drain (its goodbye bounded by DrainTimeout) fits the grace period with room")

	require.True(t, *pod.SecurityContext.RunAsNonRoot)
	require.NotZero(t, *pod.SecurityContext.RunAsUser)
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)
	sc := c.SecurityContext
	require.False(t, *sc.AllowPrivilegeEscalation)
	require.True(t, *sc.ReadOnlyRootFilesystem)
	require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	require.Empty(t, sc.Capabilities.Add)
	require.False(t, c.Resources.Requests.Cpu().IsZero())
	require.False(t, c.Resources.Requests.Memory().IsZero())
	require.False(t, c.Resources.Limits.Memory().IsZero())
}

// Every object the overlay renders (both agents'), and both Secret
// templates applied beside them, pass a real API server's server-side
// apply as a dry run.
func TestBrokerOverlayApplyDryRun(t *testing.T) {
	c := newCluster(t)
	all := build(t, brokerOverlay)
	ns := all[0].GetNamespace()
	c.ensureNamespace(t, ns)
	for _, a := range agents {
		secret := renderAgent(t, a).secret.DeepCopy()
		secret.SetNamespace(ns) // as `kubectl -n dynamo apply -f` sets it
		all = append(all, secret)
	}
	for _, u := range all {
		out := c.apply(t, u, true)
		require.Equal(t, u.GetKind(), out.GetKind())
		_, err := c.resource(t, u).Get(ctxFor(t), u.GetName(), metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "a dry run created %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// The broker's ServiceAccount, Role and RoleBinding, created for real in a
// fresh namespace, let it get, list and watch DynamoWorkerMetadata and
// EndpointSlices there and nothing else: no write verb on them, no Pods,
// Services, Secrets or ConfigMaps, no read in another namespace or
// cluster-wide.
func TestBrokerOverlayLeastPrivilege(t *testing.T) {
	checkAgentLeastPrivilege(t, renderBroker(t))
}

func checkAgentLeastPrivilege(t *testing.T, m brokerManifests) {
	t.Helper()
	c := newCluster(t)
	ns := kubetest.Namespace(t)
	from := m.byKind["Role"].GetNamespace()
	user := serviceAccountUser(ns, m.byKind["ServiceAccount"].GetName())
	check := func(namespace, verb string, a access, want bool) {
		t.Helper()
		require.Equal(t, want, c.allowed(t, ns, user, namespace, verb, a), "%s: %s %s %s in %q", m.agent.name, verb, a.resource, a.group, namespace)
	}
	for _, kind := range []string{"ServiceAccount", "Role"} {
		c.apply(t, moveTo(m.byKind[kind], from, ns), false)
	}
	check(ns, "list", workerMetadata, false)
	c.apply(t, moveTo(m.byKind["RoleBinding"], from, ns), false)
	c.awaitGrant(t, ns, user, workerMetadata)

	for _, a := range []access{workerMetadata, endpointSlices} {
		for _, v := range readVerbs {
			check(ns, v, a, true)
		}
		for _, v := range writeVerbs {
			check(ns, v, a, false)
		}
		check("default", "list", a, false)
		check("", "list", a, false)
	}
	for _, a := range []access{pods, services, secrets, configMaps} {
		for _, v := range append(readVerbs, writeVerbs...) {
			check(ns, v, a, false)
		}
	}
}

// agentRun is the real binary running one agent's Deployment.
type agentRun struct {
	cmd     *exec.Cmd
	exited  chan error
	logs    *bytes.Buffer
	metrics string // base URL of its metrics listener
}

// startAgent runs the built binary with the agent's Deployment's own
// arguments and environment: the volumes laid out under a temporary root
// as the kubelet mounts them (the template's token, the CA bundle), the
// bus URL and metrics address pointed at this machine, POD_NAMESPACE as
// the downward API fills it, and the ServiceAccount's credentials through
// KUBECONFIG (in a Pod, its mounted token).
func startAgent(t *testing.T, bin string, m brokerManifests, busAddr, ns, kubeconfig string, caPEM []byte) *agentRun {
	t.Helper()
	flags := m.flags(t)
	root := t.TempDir()
	for _, vm := range m.container().VolumeMounts {
		require.NoError(t, os.MkdirAll(filepath.Join(root, vm.MountPath), 0o755))
	}
	tokenFile, caFile := flag(t, flags, "token-file"), flag(t, flags, "ca-file")
	token := m.secretToken(t, path.Base(tokenFile))
	require.NoError(t, os.WriteFile(filepath.Join(root, tokenFile), []byte(token), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, caFile), caPEM, 0o644))

	metricsAddr := freeAddr(t)
	var args []string
	for _, a := range m.container().Args {
		name, value, _ := strings.Cut(a, "=")
		switch name {
		case "--bus-url":
			a = name + "=https://" + busAddr
		case "--metrics-listen":
			a = name + "=" + metricsAddr
		case "--token-file", "--ca-file":
			a = name + "=" + filepath.Join(root, value)
		}
		args = append(args, a)
	}
	r := &agentRun{cmd: exec.Command(bin, args...), exited: make(chan error, 1), logs: &bytes.Buffer{}, metrics: "http://" + metricsAddr}
	r.cmd.Env = append(os.Environ(), "POD_NAMESPACE="+ns, "KUBECONFIG="+kubeconfig)
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	require.NoError(t, r.cmd.Start())
	go func() { r.exited <- r.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-r.exited:
		default:
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", m.agent.command, r.logs.String())
		}
	})
	return r
}

// terminate sends SIGTERM and wants a clean exit within the Deployment's
// terminationGracePeriodSeconds, after a drain.
func (r *agentRun) terminate(t *testing.T, m brokerManifests) {
	t.Helper()
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
	grace := time.Duration(*m.dep.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	select {
	case err := <-r.exited:
		var exit *exec.ExitError
		require.False(t, errors.As(err, &exit), "%s exits 0 after SIGTERM: %v", m.agent.command, err)
		require.NoError(t, err)
		r.exited <- err // for the cleanup
	case <-time.After(grace):
		t.Fatalf("%s outlived terminationGracePeriodSeconds (%s) after SIGTERM", m.agent.command, grace)
	}
	require.Contains(t, r.logs.String(), "event bus session draining")
}

// agentCluster creates the agent's ServiceAccount, Role and RoleBinding
// for real in a fresh namespace and returns the namespace and a
// kubeconfig authenticating as the ServiceAccount's user name, with
// nothing but the Role. The router (outside the cluster) watches with its
// own admin identity, through KUBECONFIG.
func agentCluster(t *testing.T, m brokerManifests) (ns, kubeconfig string) {
	t.Helper()
	c := newCluster(t)
	ns = kubetest.Namespace(t)
	from := m.byKind["Role"].GetNamespace()
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding"} {
		c.apply(t, moveTo(m.byKind[kind], from, ns), false)
	}
	saUser := kubetest.User(t, serviceAccountUser(ns, m.byKind["ServiceAccount"].GetName()))
	t.Setenv("KUBECONFIG", kubetest.Kubeconfig(t))
	return ns, writeKubeconfig(t, saUser)
}

// exampleRouter starts a router on the example configuration, moved to
// the test's namespace, bus address and certificate; routerCfg lets a test
// set an entry's token hash and reload.
func exampleRouter(t *testing.T, ns, busAddr, certFile, keyFile string) (*server.Server, func(map[string]string) *config.Config) {
	t.Helper()
	routerCfg := func(hashes map[string]string) *config.Config {
		cfg := routerExample(t)
		cfg.Server.BindAddress = "127.0.0.1:0"
		cfg.Dynamo.Discovery.Kubernetes.Namespace = ns
		cfg.Dynamo.EventBus.Listen = busAddr
		cfg.Dynamo.EventBus.TLS.Cert, cfg.Dynamo.EventBus.TLS.Key = certFile, keyFile
		for i, e := range cfg.Dynamo.EventBus.Brokers {
			if h, ok := hashes[e.ID]; ok {
				cfg.Dynamo.EventBus.Brokers[i].TokenHash = h
			}
		}
		errs, _ := cfg.Validate()
		require.Empty(t, errs)
		return cfg
	}
	srv, err := server.New(routerCfg(nil), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv, routerCfg
}

// The real `switchyard broker`, run with the Deployment's own arguments
// and environment (the volumes laid out as the kubelet mounts them, the
// bus URL and metrics address pointed at this machine), authenticated to
// the API server as the overlay's ServiceAccount with nothing but its
// Role, against a router running the example configuration:
//   - its discovery connects with the Role (/ready 200);
//   - the example's placeholder hash refuses it (401 unauthenticated);
//   - the Secret template's token, hashed as documented and reloaded into
//     the router, is welcomed: the router counts a broker session covering
//     the example's Dynamo namespace;
//   - SIGTERM drains and exits 0 within terminationGracePeriodSeconds, and
//     the router's session ends.
func TestBrokerOverlayRunsBroker(t *testing.T) {
	m := renderBroker(t)
	ns, kubeconfig := agentCluster(t, m)
	bin := buildSwitchyard(t)
	caPEM, certFile, keyFile := busCertificates(t)
	flags := m.flags(t)
	token := m.secretToken(t, path.Base(flag(t, flags, "token-file")))

	busAddr := freeAddr(t)
	srv, routerCfg := exampleRouter(t, ns, busAddr, certFile, keyFile)
	routerBase := "http://" + srv.Addr()

	run := startAgent(t, bin, m, busAddr, ns, kubeconfig, caPEM)
	require.Eventually(t, func() bool { return statusOrZero(run.metrics+"/ready") == http.StatusOK },
		30*time.Second, 50*time.Millisecond, "the broker's discovery never connected with the overlay's Role")
	require.Eventually(t, func() bool {
		return strings.Contains(bodyOrEmpty(routerBase+"/metrics"), "\nswitchyard_event_bus_refusals_total{code=\"unauthenticated\"} ")
	}, 30*time.Second, 50*time.Millisecond, "the placeholder hash never refused the broker")
	require.Contains(t, bodyOrEmpty(run.metrics+"/metrics"), "\nswitchyard_broker_connected 0\n")

	require.NoError(t, srv.Reload(routerCfg(map[string]string{flag(t, flags, "client-id"): tokenHash(token)})))
	nsLine := "\nswitchyard_dynamo_broker_namespace_sessions{namespace=\"" + flag(t, flags, "namespace") + "\"} 1\n"
	require.Eventually(t, func() bool {
		b := bodyOrEmpty(routerBase + "/metrics")
		return strings.Contains(b, "\nswitchyard_event_bus_sessions{role=\"broker\"} 1\n") && strings.Contains(b, nsLine)
	}, 45*time.Second, 50*time.Millisecond, "the router never welcomed the broker with the documented hash")
	require.Contains(t, bodyOrEmpty(run.metrics+"/metrics"), "\nswitchyard_broker_connected 1\n")

	run.terminate(t, m)
	require.Eventually(t, func() bool {
		return strings.Contains(bodyOrEmpty(routerBase+"/metrics"), "\nswitchyard_event_bus_sessions{role=\"broker\"} 0\n")
	}, 10*time.Second, 50*time.Millisecond, "the router's broker session outlived the broker")
}

// buildSwitchyard compiles the real binary the image ships.
func buildSwitchyard(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "switchyard")
	out, err := exec.Command("go", "build", "-o", bin, "switchyard/cmd/switchyard").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

// busCertificates makes a CA and the listener's certificate for 127.0.0.1
// signed by it: the CA's PEM (the overlay's bus-ca.crt) and the
// certificate and key files (dynamo.event_bus.tls).
func busCertificates(t *testing.T) (caPEM []byte, certFile, keyFile string) {
	t.Helper()
	ca, certFile, keyFile := testpki.ServerFiles(t, "event bus test CA")
	return ca.PEM(), certFile, keyFile
}

// statusOrZero and bodyOrEmpty poll a server that may not listen yet.
func statusOrZero(u string) int {
	resp, err := http.Get(u)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func bodyOrEmpty(u string) string {
	resp, err := http.Get(u)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}
