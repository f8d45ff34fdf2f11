package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/credentials/insecure"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"switchyard/fakefleet/fleet"
	"switchyard/internal/extproctest"
	"switchyard/internal/kubetest"
	"switchyard/internal/natstest"
	"switchyard/router/admin"
	"switchyard/router/config"
	"switchyard/router/discovery"
)

// withReplicaSync turns replica sync on over ZMQ, this replica on listen,
// every replica (itself included) in peers, with the active-sequence
// account it shares.
func withReplicaSync(cfg *config.Config, listen string, peers []string) {
	cfg.EPP.ReplicaSync, cfg.EPP.ReplicaSyncListen, cfg.EPP.ReplicaPeers = true, listen, peers
	cfg.Dynamo.KV.TrackActiveBlocks, cfg.Dynamo.KV.TrackPrefillTokens = true, true
}

// replicaStatus reads the replica_sync part of the admin workers response.
func replicaStatus(t *testing.T, srv *Server) *admin.ReplicaSyncJSON {
	t.Helper()
	code, b := get(t, "http://"+srv.Addr()+"/admin/dynamo/workers", "tok")
	require.Equal(t, http.StatusOK, code, string(b))
	var resp admin.WorkersResponse
	require.NoError(t, json.Unmarshal(b, &resp))
	return resp.ReplicaSync
}

// routeHeld routes one chat through an endpoint picker and keeps its
// stream open: the request stays in flight on the worker it names.
func routeHeld(t *testing.T, srv *Server, prompt string) (*extproctest.Held, uint64) {
	t.Helper()
	g := &extproctest.Gateway{Announce: true}
	g.Picker = extprocClient(t, srv)
	body := fmt.Appendf(nil, `{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":%q}]}`, kvModel, prompt)
	r, err := http.NewRequest(http.MethodPost, "http://gateway/v1/chat/completions", nil)
	require.NoError(t, err)
	r.Header.Set("Content-Type", "application/json")
	h, err := g.Route(context.Background(), r, body)
	require.NoError(t, err)
	t.Cleanup(h.Close)
	require.Nil(t, h.Immediate, "routed, not answered")
	require.NotEmpty(t, h.Destination)
	id, err := strconv.ParseUint(h.Header.Get("x-dynamo-worker-instance-id"), 10, 64)
	require.NoError(t, err, "pins %v", h.Header)
	return h, id
}

// pickerSetup configures replica i (0 or 1) of a pair and returns its
// options.
type pickerSetup func(cfg *config.Config, i int) Options

// Two endpoint pickers (router/server with epp on) over one fake fleet,
// replica sync on over ZMQ with one static peer list naming both: a
// request the first routes, still in flight, is in the second's account
// and moves its next pick to the other worker; the second's own request
// reaches the first. /metrics shows the sync, and the admin workers
// response the core's account of its peers.
func TestTwoEndpointPickersShareTheirLoad(t *testing.T) {
	addrs := []string{freeAddr(t), freeAddr(t)}
	twoPickersShareTheirLoad(t, func(cfg *config.Config, i int) Options {
		withReplicaSync(cfg, addrs[i], addrs)
		return Options{}
	})
}

// The same pair over a real nats-server: no listener, no peer list.
func TestTwoEndpointPickersShareTheirLoadOverNATS(t *testing.T) {
	srv := natstest.Start(t)
	twoPickersShareTheirLoad(t, func(cfg *config.Config, _ int) Options {
		withReplicaSync(cfg, "", nil)
		cfg.EPP.ReplicaSyncTransport, cfg.EPP.ReplicaSyncNATSURL = config.ReplicaSyncNATS, srv.URL
		return Options{}
	})
}

// The same pair, the first finding the second through a Service on a real
// API server. The API server refuses loopback endpoints, so the second
// listens on this machine's own address, which the Service's
// EndpointSlice lists beside an address standing for the first
// (POD_IP, left out); the first listens on loopback with the same port (a
// replica dials its peers on its own sync port) and the second follows it
// through a static peer.
func TestTwoEndpointPickersFindEachOtherThroughAService(t *testing.T) {
	hostIP := nonLoopbackAddr(t)
	const selfIP = "10.255.0.1"
	port := freeOnBoth(t, []string{"127.0.0.1", hostIP})
	ns := kubetest.Namespace(t)
	ready := true
	family := discoveryv1.AddressTypeIPv4
	if strings.Contains(hostIP, ":") {
		t.Fatalf("the test expects an IPv4 host address, got %s", hostIP)
	}
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "epp-peers-x", Labels: map[string]string{discoveryv1.LabelServiceName: "epp-peers"}},
		AddressType: family,
	}
	for _, ip := range []string{selfIP, hostIP} {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	_, err := kubetest.Client(t).DiscoveryV1().EndpointSlices(ns).Create(context.Background(), sl, metav1.CreateOptions{})
	require.NoError(t, err)
	a := net.JoinHostPort("127.0.0.1", port)
	b := net.JoinHostPort(hostIP, port)
	srvA := twoPickersShareTheirLoad(t, func(cfg *config.Config, i int) Options {
		if i == 1 { // a copy of the first's configuration
			withReplicaSync(cfg, b, []string{a})
			cfg.EPP.PeerService = ""
			return Options{}
		}
		withReplicaSync(cfg, a, nil)
		cfg.EPP.PeerService = "epp-peers"
		env := map[string]string{"POD_NAMESPACE": ns, "POD_IP": selfIP}
		return Options{kubeREST: kubetest.Config(t), lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	})
	require.Equal(t, []string{b}, srvA.replicaSync.Peers(), "the Service's other endpoint, on the sync port, itself left out")
}

// nonLoopbackAddr is an IPv4 address of this machine that is not loopback.
func nonLoopbackAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil && !ipn.IP.IsLinkLocalUnicast() {
			return ipn.IP.String()
		}
	}
	msg := "this machine has no IPv4 address but loopback, which the test's EndpointSlice needs"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// freeOnBoth finds a port free on every one of the addresses.
func freeOnBoth(t *testing.T, ips []string) string {
	t.Helper()
	for range 20 {
		port := freeAddr(t)[len("127.0.0.1:"):]
		free := true
		for _, ip := range ips {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, port))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free {
			return port
		}
	}
	t.Fatal("no port free on every address")
	return ""
}

func twoPickersShareTheirLoad(t *testing.T, setup pickerSetup) *Server {
	t.Helper()
	var cfgA *config.Config
	k := startKVStack(t, fleet.Spec{Aggregated: 2}, func(cfg *config.Config) Options {
		withEPP(cfg)
		cfgA = cfg
		return setup(cfg, 0)
	})
	a := k.srv

	// B discovers from A's embedded etcd and sends to the same frontend.
	cfgB := cfgA.Clone()
	cfgB.Dynamo.Discovery.Etcd.Embedded.Enabled = false
	cfgB.Dynamo.Discovery.Etcd.Embedded.Listen = ""
	cfgB.Dynamo.Discovery.Etcd.Endpoints = []string{a.EtcdEndpoint()}
	optsB := setup(cfgB, 1)
	errs, _ := cfgB.Validate()
	require.Empty(t, errs)
	b, err := NewWithOptions(cfgB, slog.New(slog.DiscardHandler), optsB)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	eventually(t, "B discovers the fleet", func() bool {
		s := b.Discovery().Snapshot()
		return len(s.Workers) == 2 && s.CountPublishers(discovery.TopicKVEvents) == 2
	})
	transport := cfgB.EPP.ReplicaSyncTransport
	for _, srv := range []*Server{a, b} {
		eventually(t, "each picker follows its peer", func() bool {
			if transport == config.ReplicaSyncNATS {
				return metricValue(t, srv, "switchyard_replica_sync_nats_connected") == 1 && replicaStatus(t, srv).Peers == 1
			}
			return metricValue(t, srv, "switchyard_replica_sync_peers_connected") == 1 &&
				metricValue(t, srv, "switchyard_replica_sync_subscribers") == 1 && replicaStatus(t, srv).Peers == 1
		})
	}
	stA, stB := replicaStatus(t, a), replicaStatus(t, b)
	require.Equal(t, transport, stA.Transport)
	require.NotEqual(t, stA.Replica, stB.Replica)
	require.Zero(t, stB.Requests)

	_, first := routeHeld(t, a, "replica sync, first: "+longPrompt(5))
	eventually(t, "A's request in B's account", func() bool { return replicaStatus(t, b).Requests == 1 })
	_, second := routeHeld(t, b, "replica sync, second: "+longPrompt(6))
	require.NotEqual(t, first, second, "B avoids the worker A loaded")
	eventually(t, "B's request in A's account", func() bool { return replicaStatus(t, a).Requests == 1 })

	require.Positive(t, metricValue(t, a, "switchyard_replica_sync_events_published_total"))
	require.Positive(t, metricValue(t, b, "switchyard_replica_sync_events_received_total"))
	require.Positive(t, metricValue(t, b, "switchyard_replica_sync_batches_published_total"))
	require.Zero(t, metricValue(t, b, "switchyard_replica_sync_batch_gaps_total"))
	require.Zero(t, replicaStatus(t, b).Gaps)
	return a
}

func extprocClient(t *testing.T, srv *Server) extprocv3.ExternalProcessorClient {
	t.Helper()
	return extprocv3.NewExternalProcessorClient(eppClient(t, srv.EPPAddr(), insecure.NewCredentials()))
}
