package kubernetes

import (
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/router/bus/kvlistener"
	"switchyard/router/config"
)

// backendFlags reads the kv-listener's --backend NAME=NAMESPACE pairs.
func backendFlags(t *testing.T, flags map[string][]string) []kvlistener.Backend {
	t.Helper()
	require.NotEmpty(t, flags["backend"])
	var out []kvlistener.Backend
	for _, p := range flags["backend"] {
		name, ns, ok := strings.Cut(p, "=")
		require.True(t, ok && name != "" && ns != "", "--backend=%s is NAME=NAMESPACE", p)
		out = append(out, kvlistener.Backend{Name: name, Namespace: ns})
	}
	return out
}

// busWarnings are the validation warnings about the event bus's entries
// and the kv_cache_index sources: grants without sources, sources without
// grants, a listener that is off.
func busWarnings(warns []config.Issue) []config.Issue {
	var out []config.Issue
	for _, w := range warns {
		if strings.HasPrefix(w.Path, "dynamo.kv.sources") || strings.HasPrefix(w.Path, "dynamo.event_bus") {
			out = append(out, w)
		}
	}
	return out
}

// The router's example configuration agrees with the kv-listener's
// Deployment: a kv_listener entry whose id is the --client-id, granted
// exactly the --backend names; a dynamo.kv.sources entry per --backend,
// through the event bus, in its namespace (the workers' namespace the
// router discovers); KV selection on and following kv-events, so that the
// sources are followed at all; --bus-url reaching the listener, as the
// broker's does. It validates with the router's rules without a warning
// about the event bus or the sources. Its placeholder hash matches no
// token and differs from the broker's; the two Secret templates hold
// different tokens, and both hashed as documented validate together.
func TestKVListenerRouterExample(t *testing.T) {
	m := renderAgent(t, kvListenerAgent)
	flags := m.flags(t)
	cfg := routerExample(t)
	errs, warns := cfg.Validate()
	require.Empty(t, errs)
	require.Empty(t, busWarnings(warns))

	e := entryOf(t, cfg, m)
	require.Equal(t, config.BusRoleKVListener, e.Role)
	require.Empty(t, e.Namespaces)
	backends := backendFlags(t, flags)
	var names []string
	for _, b := range backends {
		names = append(names, b.Name)
		i := slices.IndexFunc(cfg.Dynamo.KV.Sources, func(s config.KVSource) bool { return s.Backend == b.Name })
		require.GreaterOrEqual(t, i, 0, "dynamo.kv.sources follows --backend %s", b.Name)
		s := cfg.Dynamo.KV.Sources[i]
		require.Equal(t, config.KVSourceTransportEventBus, s.Transport)
		require.Equal(t, b.Namespace, s.Namespace, "the source's namespace is the --backend's")
		require.Equal(t, cfg.Dynamo.Discovery.Kubernetes.DynamoNamespace, s.Namespace, "the router discovers the backend's workers")
	}
	require.Equal(t, names, e.Backends, "the entry grants exactly the announced backends")
	require.Len(t, cfg.Dynamo.KV.Sources, len(backends))
	require.True(t, cfg.Dynamo.Enabled && cfg.Dynamo.KV.Enabled && cfg.Dynamo.KV.UseKVEvents, "the sources are followed only by KV selection on kv-events")

	require.Equal(t, flag(t, renderBroker(t).flags(t), "bus-url"), flag(t, flags, "bus-url"), "both agents dial the one listener")
	bm := renderBroker(t)
	require.NotEqual(t, entryOf(t, cfg, bm).TokenHash, e.TokenHash)

	token := m.secretToken(t, path.Base(flag(t, flags, "token-file")))
	brokerToken := bm.secretToken(t, path.Base(flag(t, bm.flags(t), "token-file")))
	require.NotEqual(t, brokerToken, token, "the templates hold different tokens")
	require.NotEqual(t, tokenHash(token), e.TokenHash, "the placeholders must not pair up into a working credential")
	e.TokenHash = tokenHash(token)
	entryOf(t, cfg, bm).TokenHash = tokenHash(brokerToken)
	errs, after := cfg.Validate()
	require.Empty(t, errs)
	require.Equal(t, warns, after)
}

// The kv-listener renders as consistently as the broker (see
// TestBrokerOverlayRenders), and: its objects are its own (another
// ServiceAccount, Role, Secret and CA ConfigMap than the broker's); its
// ring bounds are ones `switchyard kv-listener` accepts, and the memory
// limit holds its rings several times over.
func TestKVListenerOverlayRenders(t *testing.T) {
	m := renderAgent(t, kvListenerAgent)
	checkAgentRenders(t, m)
	b := renderBroker(t)
	for kind, u := range m.byKind {
		require.NotEqual(t, b.byKind[kind].GetName(), u.GetName(), "the kv-listener's %s is its own", kind)
	}
	require.NotEqual(t, b.secret.GetName(), m.secret.GetName())
	require.NotEqual(t, portOf(t, flag(t, b.flags(t), "metrics-listen")), portOf(t, flag(t, m.flags(t), "metrics-listen")),
		"the command's default ports differ, and so do the Deployments'")

	flags := m.flags(t)
	events, err := strconv.Atoi(flag(t, flags, "ring-events"))
	require.NoError(t, err)
	ringBytes, err := strconv.ParseInt(flag(t, flags, "ring-bytes"), 10, 64)
	require.NoError(t, err)
	backends := backendFlags(t, flags)
	_, err = kvlistener.New(kvlistener.Config{Backends: backends, RingEvents: events, RingBytes: ringBytes})
	require.NoError(t, err)
	c := m.container()
	limit := c.Resources.Limits.Memory().Value()
	require.GreaterOrEqual(t, limit, 4*int64(len(backends))*ringBytes, "the rings fit the memory limit with room")
}

// The kv-listener's ServiceAccount, Role and RoleBinding, created for real
// in a fresh namespace, let it get, list and watch DynamoWorkerMetadata
// and EndpointSlices there, what its discovery reads, and nothing else.
func TestKVListenerOverlayLeastPrivilege(t *testing.T) {
	checkAgentLeastPrivilege(t, renderAgent(t, kvListenerAgent))
}

// The real `switchyard kv-listener`, run with the Deployment's own
// arguments and environment, authenticated to the API server as the
// overlay's ServiceAccount with nothing but its Role, against a router on
// the example configuration:
//   - its discovery connects with the Role (/ready 200);
//   - the example's placeholder hash refuses it (401 unauthenticated);
//   - the Secret template's token, hashed as documented and reloaded into
//     the router, is welcomed as a kv_listener session, and the router's
//     dynamo.kv.sources entry gets its SSE stream from the listener;
//   - SIGTERM drains and exits 0 within terminationGracePeriodSeconds; the
//     router's session and the source's stream end.
func TestKVListenerOverlayRunsKVListener(t *testing.T) {
	m := renderAgent(t, kvListenerAgent)
	ns, kubeconfig := agentCluster(t, m)
	bin := buildSwitchyard(t)
	caPEM, certFile, keyFile := busCertificates(t)
	flags := m.flags(t)
	token := m.secretToken(t, path.Base(flag(t, flags, "token-file")))

	busAddr := freeAddr(t)
	srv, routerCfg := exampleRouter(t, ns, busAddr, certFile, keyFile)
	routerBase := "http://" + srv.Addr()
	require.Contains(t, bodyOrEmpty(routerBase+"/metrics"), "\nswitchyard_dynamo_kv_source_sources 1\n")

	run := startAgent(t, bin, m, busAddr, ns, kubeconfig, caPEM)
	require.Eventually(t, func() bool { return statusOrZero(run.metrics+"/ready") == http.StatusOK },
		30*time.Second, 50*time.Millisecond, "the kv-listener's discovery never connected with the overlay's Role")
	require.Eventually(t, func() bool {
		return strings.Contains(bodyOrEmpty(routerBase+"/metrics"), "\nswitchyard_event_bus_refusals_total{code=\"unauthenticated\"} ")
	}, 30*time.Second, 50*time.Millisecond, "the placeholder hash never refused the kv-listener")
	require.Contains(t, bodyOrEmpty(run.metrics+"/metrics"), "\nswitchyard_kv_listener_connected 0\n")

	require.NoError(t, srv.Reload(routerCfg(map[string]string{flag(t, flags, "client-id"): tokenHash(token)})))
	require.Eventually(t, func() bool {
		b := bodyOrEmpty(routerBase + "/metrics")
		return strings.Contains(b, "\nswitchyard_event_bus_sessions{role=\"kv_listener\"} 1\n") &&
			strings.Contains(b, "\nswitchyard_dynamo_kv_source_connected 1\n")
	}, 45*time.Second, 50*time.Millisecond, "the router never welcomed the kv-listener and opened its source")
	lb := bodyOrEmpty(run.metrics + "/metrics")
	require.Contains(t, lb, "\nswitchyard_kv_listener_connected 1\n")
	require.Contains(t, lb, "\nswitchyard_kv_listener_sse_streams 1\n")

	run.terminate(t, m)
	require.Eventually(t, func() bool {
		b := bodyOrEmpty(routerBase + "/metrics")
		return strings.Contains(b, "\nswitchyard_event_bus_sessions{role=\"kv_listener\"} 0\n") &&
			strings.Contains(b, "\nswitchyard_dynamo_kv_source_connected 0\n")
	}, 10*time.Second, 50*time.Millisecond, "the router's kv_listener session outlived the kv-listener")
}
