package kubernetes

import (
	"net"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"switchyard/internal/kubetest"
	"switchyard/router/config"
)

const eppOverlay = "dynamo-epp"

// The CRDs the endpoint picker's overlay needs besides Dynamo's, from
// their modules at the versions the project speaks.
const (
	inferenceExtension = "sigs.k8s.io/gateway-api-inference-extension@v1.5.0"
	gatewayAPI         = "sigs.k8s.io/gateway-api@v1.6.3"
)

func installGatewayCRDs(t *testing.T) {
	t.Helper()
	kubetest.InstallCRDs(t,
		kubetest.ModuleFile(t, inferenceExtension, "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml"),
		kubetest.ModuleFile(t, gatewayAPI, "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml"))
}

func port(t *testing.T, hostPort string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostPort)
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return n
}

// The endpoint-picker overlay renders into one consistent whole: its
// configuration validates with the Deployment's DYN_* variables laid over
// it; the container runs `switchyard epp` with ports and gRPC probes on
// what the file binds; the Service exposes the ext_proc port; the
// InferencePool names that Service and port as its endpoint picker,
// targets epp.target_port and selects the fleet's worker Pods; the
// HTTPRoute sends a Gateway's traffic to the pool.
func TestEPPOverlayRenders(t *testing.T) {
	r := render(t, eppOverlay)
	checkBinding(t, r)
	cfg := r.routerConfig(t, noEnv)
	require.True(t, cfg.EPP.Enabled)
	require.Equal(t, config.SourceKubernetes, cfg.Dynamo.Discovery.Source)

	var dep struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Args []string `json:"args"`
						Env  []struct {
							Name  string `json:"name"`
							Value string `json:"value"`
						} `json:"env"`
						Ports []struct {
							Name          string `json:"name"`
							ContainerPort int    `json:"containerPort"`
						} `json:"ports"`
						ReadinessProbe grpcProbe `json:"readinessProbe"`
						LivenessProbe  grpcProbe `json:"livenessProbe"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	require.NoError(t, convert(r.byKind["Deployment"], &dep))
	c := dep.Spec.Template.Spec.Containers[0]
	require.Equal(t, "epp", c.Args[0])

	env := map[string]string{}
	for _, e := range c.Env {
		if slices.ContainsFunc(config.EPPVariables, func(v config.EPPVariable) bool { return v.Name == e.Name }) {
			env[e.Name] = e.Value
		}
	}
	require.NotEmpty(t, env, "the Deployment sets Dynamo's variables")
	_, err := config.ApplyEPPVariables(cfg, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	errs, _ := cfg.Validate()
	require.Empty(t, errs, "the file with the Deployment's variables laid over it")

	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	require.Equal(t, port(t, cfg.EPP.Listen), ports["grpc"])
	require.Equal(t, port(t, cfg.EPP.HealthListen), ports["grpc-health"])
	require.Equal(t, port(t, cfg.Server.BindAddress), ports["http"])
	require.Equal(t, grpcProbe{GRPC: grpcAction{Port: ports["grpc-health"], Service: "readiness"}}, c.ReadinessProbe)
	require.Equal(t, grpcProbe{GRPC: grpcAction{Port: ports["grpc-health"], Service: "liveness"}}, c.LivenessProbe)

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
	ref, _, _ := unstructured.NestedMap(pool.Object, "spec", "endpointPickerRef")
	require.Equal(t, svc.GetName(), ref["name"])
	require.Equal(t, grpcPort, ref["port"].(map[string]any)["number"])
	targets, _, _ := unstructured.NestedSlice(pool.Object, "spec", "targetPorts")
	require.Equal(t, []any{map[string]any{"number": int64(cfg.EPP.TargetPort)}}, targets)
	sel, _, _ := unstructured.NestedStringMap(pool.Object, "spec", "selector", "matchLabels")
	require.Equal(t, cfg.Dynamo.Discovery.Kubernetes.DynamoNamespace, sel["nvidia.com/dynamo-namespace"])

	rules, _, _ := unstructured.NestedSlice(r.byKind["HTTPRoute"].Object, "spec", "rules")
	backend := rules[0].(map[string]any)["backendRefs"].([]any)[0].(map[string]any)
	require.Equal(t, "InferencePool", backend["kind"])
	require.Equal(t, pool.GetName(), backend["name"])
	require.Equal(t, int64(cfg.EPP.TargetPort), backend["port"])
}

type grpcProbe struct {
	GRPC             grpcAction `json:"grpc"`
	PeriodSeconds    int        `json:"-"`
	FailureThreshold int        `json:"-"`
}

type grpcAction struct {
	Port    int    `json:"port"`
	Service string `json:"service"`
}

// Every object of the endpoint-picker overlay, the InferencePool and the
// HTTPRoute included, passes a real API server's server-side apply as a
// dry run, with the Inference Extension's and Gateway API's CRDs
// installed; its Role grants exactly the metadata source's reads.
func TestEPPOverlayOnTheAPIServer(t *testing.T) {
	c := newCluster(t)
	installGatewayCRDs(t)
	r := render(t, eppOverlay)
	c.ensureNamespace(t, r.byKind["Deployment"].GetNamespace())
	for _, u := range r.all {
		out := c.apply(t, u, true)
		require.Equal(t, u.GetKind(), out.GetKind())
	}

	ns := kubetest.Namespace(t)
	user := serviceAccountUser(ns, r.byKind["ServiceAccount"].GetName())
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding"} {
		c.apply(t, moveTo(r.byKind[kind], r.byKind[kind].GetNamespace(), ns), false)
	}
	c.awaitGrant(t, ns, user, workerMetadata)
	for _, a := range []access{workerMetadata, endpointSlices} {
		for _, v := range readVerbs {
			require.True(t, c.allowed(t, ns, user, ns, v, a), "%s %s", v, a.resource)
		}
		for _, v := range writeVerbs {
			require.False(t, c.allowed(t, ns, user, ns, v, a), "%s %s", v, a.resource)
		}
	}
	for _, a := range []access{pods, secrets, configMaps, {"inference.networking.k8s.io", "inferencepools"}} {
		require.False(t, c.allowed(t, ns, user, ns, "list", a), "list %s", a.resource)
	}
}
