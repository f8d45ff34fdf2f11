package kubernetes

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"switchyard/internal/kubetest"
	"switchyard/router/config"
	"switchyard/router/server"
)

const standaloneOverlay = "epp-standalone"

var inferencePools = access{"inference.networking.k8s.io", "inferencepools"}

// container is the part of a rendered Deployment's only container the
// standalone tests read.
type container struct {
	Args []string `json:"args"`
	Env  []struct {
		Name      string `json:"name"`
		Value     string `json:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `json:"fieldPath"`
			} `json:"fieldRef"`
		} `json:"valueFrom"`
	} `json:"env"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	ReadinessProbe *json.RawMessage `json:"readinessProbe"`
}

type deployment struct {
	Spec struct {
		Template struct {
			Metadata struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				Containers []container `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

func decodeDeployment(t *testing.T, u *unstructured.Unstructured) deployment {
	t.Helper()
	var d deployment
	b, err := u.MarshalJSON()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &d))
	require.Len(t, d.Spec.Template.Spec.Containers, 1, "Deployment %s", u.GetName())
	return d
}

// eppEnv is the endpoint picker's DYN_* variables as the kubelet gives
// them to the container in namespace ns: a value, or the Pod's namespace
// through the downward API (the only reference the overlay may use).
func eppEnv(t *testing.T, c container, ns string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		if !strings.HasPrefix(e.Name, "DYN_") {
			continue
		}
		if e.ValueFrom != nil {
			require.NotNil(t, e.ValueFrom.FieldRef, "%s", e.Name)
			require.Equal(t, "metadata.namespace", e.ValueFrom.FieldRef.FieldPath, "%s", e.Name)
			env[e.Name] = ns
			continue
		}
		env[e.Name] = e.Value
	}
	return env
}

// standaloneConfig is the router's configuration as `switchyard epp`
// builds it in the Pod: the file with the Deployment's DYN_* variables
// laid over it, validated by the router's own rules.
func standaloneConfig(t *testing.T, r rendered, ns string) *config.Config {
	t.Helper()
	cfg := r.parseConfig(t, noEnv)
	c := decodeDeployment(t, r.byKind["Deployment"]).Spec.Template.Spec.Containers[0]
	env := eppEnv(t, c, ns)
	for name := range env {
		require.True(t, isEPPVariable(name), "%s is not a variable `switchyard epp` reads", name)
	}
	_, err := config.ApplyEPPVariables(cfg, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	errs, _ := cfg.Validate()
	require.Empty(t, errs, "the file with the Deployment's variables laid over it")
	return cfg
}

func isEPPVariable(name string) bool {
	for _, v := range config.EPPVariables {
		if v.Name == name {
			return true
		}
	}
	return false
}

// flags reads `--name=value` and bare `--name` arguments.
func flags(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		out[name] = value
	}
	return out
}

// The standalone overlay renders into one consistent whole: the router's
// file with the Deployment's variables laid over it is standalone mode
// with the overlay's own pool (its name and namespace), a model and a
// block size; the container runs `switchyard epp` with gRPC probes on the
// health listener; the Service exposes the ext_proc port the pool names
// as its endpoint picker, failing closed; the pool selects the example
// vLLM Pods and not the picker's, targets the port vLLM serves on; vLLM
// serves the picker's model at its block size with prefix caching and
// publishes KV events by ZMQ on the port the picker dials; the HTTPRoute
// sends a Gateway's traffic to the pool.
func TestStandaloneOverlayRenders(t *testing.T) {
	r := render(t, standaloneOverlay)
	checkBinding(t, r)
	ns := r.byKind["Deployment"].GetNamespace()
	for _, u := range r.all {
		require.Equal(t, ns, u.GetNamespace(), "%s %s", u.GetKind(), u.GetName())
	}
	cfg := standaloneConfig(t, r, ns)
	require.Equal(t, config.EPPModeStandalone, cfg.EPP.Mode)
	require.Equal(t, config.SourceInferencePool, cfg.Dynamo.Discovery.Source)
	require.True(t, cfg.Dynamo.KV.Enabled, "KV-aware picking on the engines' events")

	dep := decodeDeployment(t, r.byKind["Deployment"])
	c := dep.Spec.Template.Spec.Containers[0]
	require.Equal(t, "epp", c.Args[0])
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	require.Equal(t, port(t, cfg.EPP.Listen), ports["grpc"])
	require.Equal(t, port(t, cfg.EPP.HealthListen), ports["grpc-health"])
	require.Equal(t, port(t, cfg.Server.BindAddress), ports["http"])
	var probes struct {
		ReadinessProbe grpcProbe `json:"readinessProbe"`
		LivenessProbe  grpcProbe `json:"livenessProbe"`
	}
	containers, _, _ := unstructured.NestedSlice(r.byKind["Deployment"].Object, "spec", "template", "spec", "containers")
	b, err := json.Marshal(containers[0])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &probes))
	require.Equal(t, grpcProbe{GRPC: grpcAction{Port: ports["grpc-health"], Service: "readiness"}}, probes.ReadinessProbe)
	require.Equal(t, grpcProbe{GRPC: grpcAction{Port: ports["grpc-health"], Service: "liveness"}}, probes.LivenessProbe)

	svc := r.byKind["Service"]
	svcPorts, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	var grpcPort int64
	for _, p := range svcPorts {
		if m := p.(map[string]any); m["targetPort"] == "grpc" {
			grpcPort = m["port"].(int64)
		}
	}
	require.Equal(t, int64(ports["grpc"]), grpcPort, "the Service exposes the ext_proc port")

	pool := r.byKind["InferencePool"]
	require.Equal(t, cfg.Dynamo.Discovery.InferencePool.Name, pool.GetName(), "DYN_EPP_POOL_NAME names the overlay's pool")
	require.Equal(t, cfg.Dynamo.Discovery.InferencePool.Namespace, pool.GetNamespace())
	ref, _, _ := unstructured.NestedMap(pool.Object, "spec", "endpointPickerRef")
	require.Equal(t, "Service", ref["kind"])
	require.Equal(t, svc.GetName(), ref["name"])
	require.Equal(t, grpcPort, ref["port"].(map[string]any)["number"])
	require.Equal(t, "FailClose", ref["failureMode"], "the failure mode is spelled out")
	targets, _, _ := unstructured.NestedSlice(pool.Object, "spec", "targetPorts")
	require.Len(t, targets, 1)
	targetPort := targets[0].(map[string]any)["number"].(int64)
	matchLabels, _, _ := unstructured.NestedStringMap(pool.Object, "spec", "selector", "matchLabels")
	selector := labels.SelectorFromSet(matchLabels)
	require.False(t, selector.Matches(labels.Set(dep.Spec.Template.Metadata.Labels)), "the pool must not select the endpoint picker")

	vllm := decodeDeployment(t, r.other(t, "Deployment", "vllm"))
	require.True(t, selector.Matches(labels.Set(vllm.Spec.Template.Metadata.Labels)), "the pool selects the vLLM Pods")
	engine := vllm.Spec.Template.Spec.Containers[0]
	args := flags(engine.Args)
	require.Equal(t, cfg.EPP.ModelName, args["served-model-name"], "vLLM serves DYN_MODEL_NAME")
	require.Equal(t, strconv.Itoa(cfg.EPP.KVCacheBlockSize), args["block-size"], "vLLM's block size is DYN_KV_CACHE_BLOCK_SIZE")
	require.Equal(t, strconv.FormatInt(targetPort, 10), args["port"], "vLLM serves on the pool's target port")
	require.Contains(t, args, "enable-prefix-caching")
	var events struct {
		Enable    bool   `json:"enable_kv_cache_events"`
		Publisher string `json:"publisher"`
		Endpoint  string `json:"endpoint"`
	}
	require.NoError(t, json.Unmarshal([]byte(args["kv-events-config"]), &events), "--kv-events-config is JSON")
	require.True(t, events.Enable)
	require.Equal(t, "zmq", events.Publisher)
	bind, found := strings.CutPrefix(events.Endpoint, "tcp://")
	require.True(t, found, "vLLM binds a TCP endpoint: %s", events.Endpoint)
	publishes := port(t, bind)
	dials := cfg.Dynamo.Discovery.InferencePool.KVEventsPort
	if a, ok := vllm.Spec.Template.Metadata.Annotations["switchyard.dev/kv-events-port"]; ok {
		dials, err = strconv.Atoi(a)
		require.NoError(t, err)
	}
	require.Equal(t, publishes, dials, "the picker dials the port vLLM publishes KV events on")
	enginePorts := map[int]bool{}
	for _, p := range engine.Ports {
		enginePorts[p.ContainerPort] = true
	}
	require.True(t, enginePorts[int(targetPort)] && enginePorts[publishes], "vLLM declares its ports: %v", engine.Ports)
	require.NotNil(t, engine.ReadinessProbe, "a Pod is a worker once Ready: vLLM needs a readiness probe")

	rules, _, _ := unstructured.NestedSlice(r.byKind["HTTPRoute"].Object, "spec", "rules")
	backend := rules[0].(map[string]any)["backendRefs"].([]any)[0].(map[string]any)
	require.Equal(t, "inference.networking.k8s.io", backend["group"])
	require.Equal(t, "InferencePool", backend["kind"])
	require.Equal(t, pool.GetName(), backend["name"])
	require.Equal(t, targetPort, backend["port"])
}

// Every object of the standalone overlay, the example engine, the
// InferencePool and the HTTPRoute included, passes a real API server's
// server-side apply as a dry run with the Inference Extension's and
// Gateway API's CRDs installed. Its Role holds exactly two rules, get,
// list and watch on InferencePools and on Pods, and access reviews against
// the real authorizer agree: those reads in the namespace, no write verb,
// no subresource, nothing else, nothing outside the namespace.
func TestStandaloneOverlayOnTheAPIServer(t *testing.T) {
	c := newCluster(t)
	installGatewayCRDs(t)
	r := render(t, standaloneOverlay)
	c.ensureNamespace(t, r.byKind["Deployment"].GetNamespace())
	for _, u := range r.all {
		out := c.apply(t, u, true)
		require.Equal(t, u.GetKind(), out.GetKind())
	}

	var role struct {
		Rules []struct {
			APIGroups     []string `json:"apiGroups"`
			Resources     []string `json:"resources"`
			Verbs         []string `json:"verbs"`
			ResourceNames []string `json:"resourceNames"`
		} `json:"rules"`
	}
	require.NoError(t, convert(r.byKind["Role"], &role))
	granted := map[access][]string{}
	for _, rule := range role.Rules {
		require.Empty(t, rule.ResourceNames)
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				granted[access{g, res}] = append(granted[access{g, res}], rule.Verbs...)
			}
		}
	}
	require.Equal(t, map[access][]string{inferencePools: readVerbs, pods: readVerbs}, granted)

	ns := kubetest.Namespace(t)
	user := serviceAccountUser(ns, r.byKind["ServiceAccount"].GetName())
	from := r.byKind["Role"].GetNamespace()
	for _, kind := range []string{"ServiceAccount", "Role"} {
		c.apply(t, moveTo(r.byKind[kind], from, ns), false)
	}
	require.False(t, c.allowed(t, ns, user, ns, "list", pods), "nothing is granted before the binding")
	c.apply(t, moveTo(r.byKind["RoleBinding"], from, ns), false)
	c.awaitGrant(t, ns, user, inferencePools)
	check := func(namespace, verb string, a access, want bool) {
		t.Helper()
		require.Equal(t, want, c.allowed(t, ns, user, namespace, verb, a), "%s %s %s in %q", verb, a.resource, a.group, namespace)
	}
	for _, a := range []access{inferencePools, pods} {
		for _, v := range readVerbs {
			check(ns, v, a, true)
		}
		for _, v := range writeVerbs {
			check(ns, v, a, false)
		}
		check("default", "list", a, false)
		check("", "list", a, false) // cluster-wide
	}
	others := []access{
		secrets, configMaps, workerMetadata, endpointSlices,
		{"", "services"}, {"", "endpoints"}, {"apps", "deployments"},
		{"", "pods/log"}, {"", "pods/exec"}, {"", "pods/status"},
		{"inference.networking.k8s.io", "inferencepools/status"},
		{"inference.x-k8s.io", "inferenceobjectives"},
		{"gateway.networking.k8s.io", "httproutes"},
	}
	for _, a := range others {
		for _, v := range append(readVerbs, writeVerbs...) {
			check(ns, v, a, false)
		}
	}
}

// The endpoint picker runs the overlay's very configuration, with the
// Deployment's variables, as the overlay's ServiceAccount against the
// real API server: with nothing more than the overlay's Role it reads the
// overlay's InferencePool and watches its Pods (discovery connects, the
// gRPC readiness the kubelet probes turns serving), and a Pod made from the
// example vLLM Deployment's template becomes a worker once it is Running
// and Ready.
func TestStandaloneRouterWatchesThePoolWithItsRole(t *testing.T) {
	c := newCluster(t)
	installGatewayCRDs(t)
	ns := kubetest.Namespace(t)
	r := render(t, standaloneOverlay)
	from := r.byKind["Role"].GetNamespace()
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "InferencePool"} {
		c.apply(t, moveTo(r.byKind[kind], from, ns), false)
	}
	user := kubetest.User(t, serviceAccountUser(ns, r.byKind["ServiceAccount"].GetName()))
	t.Setenv("KUBECONFIG", writeKubeconfig(t, user))

	cfg := standaloneConfig(t, r, ns)
	require.Equal(t, ns, cfg.Dynamo.Discovery.InferencePool.Namespace, "the pool is looked for in the picker's own namespace")
	cfg.Server.BindAddress = "127.0.0.1:0"
	cfg.EPP.Listen = "127.0.0.1:0"
	cfg.EPP.HealthListen = freeAddr(t)
	srv, err := server.New(cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer srv.Close()
	base := "http://" + srv.Addr()

	const connected = "\nswitchyard_dynamo_discovery_connected 1\n"
	require.Eventually(t, func() bool { return strings.Contains(body(t, base+"/metrics"), connected) },
		30*time.Second, 50*time.Millisecond, "the pool watcher never connected with the overlay's Role")
	conn, err := grpc.NewClient(cfg.EPP.HealthListen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		out, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
		return err == nil && out.Status == healthpb.HealthCheckResponse_SERVING
	}, 30*time.Second, 50*time.Millisecond, "the readiness the kubelet probes")
	require.Equal(t, http.StatusOK, status(t, base+"/health"))

	const oneWorker = "\nswitchyard_dynamo_workers{role=\"aggregated\"} 1\n"
	require.NotContains(t, body(t, base+"/metrics"), oneWorker)
	pod := enginePod(t, r, ns)
	created, err := c.cs.CoreV1().Pods(ns).Create(ctxFor(t), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	// No kubelet runs here: the test reports the Pod started and ready.
	created.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "192.0.2.10", PodIPs: []corev1.PodIP{{IP: "192.0.2.10"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	_, err = c.cs.CoreV1().Pods(ns).UpdateStatus(ctxFor(t), created, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(body(t, base+"/metrics"), oneWorker) },
		30*time.Second, 50*time.Millisecond, "the vLLM Pod never became a worker")
}

// enginePod is a Pod of the example vLLM Deployment, as its ReplicaSet
// would create it in ns.
func enginePod(t *testing.T, r rendered, ns string) *corev1.Pod {
	t.Helper()
	tmpl, _, err := unstructured.NestedMap(r.other(t, "Deployment", "vllm").Object, "spec", "template")
	require.NoError(t, err)
	var spec corev1.PodTemplateSpec
	require.NoError(t, convert(&unstructured.Unstructured{Object: tmpl}, &spec))
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "vllm-0", Namespace: ns, Labels: spec.Labels, Annotations: spec.Annotations,
	}, Spec: spec.Spec}
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
