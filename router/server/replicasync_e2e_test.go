package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/credentials/insecure"

	"switchyard/fakefleet/fleet"
	"switchyard/internal/extproctest"
	"switchyard/router/admin"
	"switchyard/router/config"
	"switchyard/router/discovery"
)

// freePort returns a loopback address nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

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

// Two endpoint pickers (router/server with epp on) over one fake fleet,
// replica sync on over ZMQ with one static peer list naming both: a
// request the first routes, still in flight, is in the second's account
// and moves its next pick to the other worker; the second's own request
// reaches the first. /metrics shows the sync, and the admin workers
// response the core's account of its peers.
func TestTwoEndpointPickersShareTheirLoad(t *testing.T) {
	addrA, addrB := freePort(t), freePort(t)
	peers := []string{addrA, addrB}
	var cfgA *config.Config
	k := startKVStack(t, fleet.Spec{Aggregated: 2}, func(cfg *config.Config) Options {
		withEPP(cfg)
		withReplicaSync(cfg, addrA, peers)
		cfgA = cfg
		return Options{}
	})
	a := k.srv

	// B discovers from A's embedded etcd and sends to the same frontend.
	cfgB := cfgA.Clone()
	cfgB.Dynamo.Discovery.Etcd.Embedded.Enabled = false
	cfgB.Dynamo.Discovery.Etcd.Embedded.Listen = ""
	cfgB.Dynamo.Discovery.Etcd.Endpoints = []string{a.EtcdEndpoint()}
	withReplicaSync(cfgB, addrB, peers)
	errs, _ := cfgB.Validate()
	require.Empty(t, errs)
	b, err := NewWithOptions(cfgB, slog.New(slog.DiscardHandler), Options{})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	eventually(t, "B discovers the fleet", func() bool {
		s := b.Discovery().Snapshot()
		return len(s.Workers) == 2 && s.CountPublishers(discovery.TopicKVEvents) == 2
	})
	for _, srv := range []*Server{a, b} {
		eventually(t, "each picker follows its peer", func() bool {
			return metricValue(t, srv, "switchyard_replica_sync_peers_connected") == 1 &&
				metricValue(t, srv, "switchyard_replica_sync_subscribers") == 1 && replicaStatus(t, srv).Peers == 1
		})
	}
	stA, stB := replicaStatus(t, a), replicaStatus(t, b)
	require.Equal(t, "zmq", stA.Transport)
	require.NotEqual(t, stA.Replica, stB.Replica)
	require.Zero(t, stB.Requests)

	_, first := routeHeld(t, a, "replica sync, first: "+longPrompt(5))
	eventually(t, "A's request in B's account", func() bool { return replicaStatus(t, b).Requests == 1 })
	_, second := routeHeld(t, b, "replica sync, second: "+longPrompt(6))
	require.NotEqual(t, first, second, "B avoids the worker A loaded")
	eventually(t, "B's request in A's account", func() bool { return replicaStatus(t, a).Requests == 1 })

	require.Positive(t, metricValue(t, a, "switchyard_replica_sync_events_published_total"))
	require.Positive(t, metricValue(t, b, "switchyard_replica_sync_events_received_total"), metricValue(t, a, "switchyard_replica_sync_batches_published_total"))
	require.Positive(t, metricValue(t, b, "switchyard_replica_sync_batches_published_total"))
	require.Zero(t, metricValue(t, b, "switchyard_replica_sync_batch_gaps_total"))
	require.Zero(t, replicaStatus(t, b).Gaps)
}

func extprocClient(t *testing.T, srv *Server) extprocv3.ExternalProcessorClient {
	t.Helper()
	return extprocv3.NewExternalProcessorClient(eppClient(t, srv.EPPAddr(), insecure.NewCredentials()))
}
