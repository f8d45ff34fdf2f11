package server

import (
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"

	"switchyard/router/admin"
	"switchyard/router/config"
	"switchyard/router/core"
	"switchyard/router/replicasync"
	"switchyard/router/replicasync/peerservice"
)

// newReplicaSync binds the replica-sync PUB socket (ZMQ) or connects to
// the NATS server when epp.replica_sync asks for it, follows
// epp.peer_service's endpoints when set, and points the core's hooks at
// it: the replica's own changes are published, peers' gaps and refusals
// counted. It takes effect at start only.
func (s *Server) newReplicaSync(cfg *config.Config, hooks *core.Hooks, o Options) error {
	e := cfg.EPP
	if !e.Enabled || !e.ReplicaSync {
		return nil
	}
	m := replicasync.NewMetrics()
	m.Register(s.metrics.Registry)
	ns := cfg.Dynamo.Discovery.Etcd.Namespace
	rs, err := replicasync.New(replicasync.Options{Transport: e.ReplicaSyncTransport, NATSURL: e.ReplicaSyncNATSURL,
		Namespace: ns, Listen: e.ReplicaSyncListen, Peers: e.ReplicaPeers,
		Log: s.log.With("component", "replica_sync"), Metrics: m})
	if err != nil {
		return err
	}
	s.replicaSync, s.replicaSyncTransport = rs, e.ReplicaSyncTransport
	hooks.Sync, hooks.PeerGap, hooks.PeerRefused = rs.Publish, m.CountGap, m.CountRefused
	if e.PeerService != "" && e.ReplicaSyncTransport != config.ReplicaSyncNATS {
		if err := s.followPeerService(cfg, o); err != nil {
			rs.Close()
			s.replicaSync = nil
			return err
		}
	}
	if e.ReplicaSyncTransport == config.ReplicaSyncNATS {
		s.log.Info("replica sync on", "replica", rs.ID(), "transport", "nats", "subject", rs.Topic())
	} else {
		s.log.Info("replica sync on", "replica", rs.ID(), "transport", "zmq", "listen", rs.Addr(), "peers", len(e.ReplicaPeers))
	}
	return nil
}

// replicaSyncStatus is replica sync in the admin workers response: the
// core's account of its peers; nil when sync is off.
func (s *Server) replicaSyncStatus() *admin.ReplicaSyncJSON {
	if s.replicaSync == nil {
		return nil
	}
	st := s.core.PeerStats()
	refused := map[string]uint64{}
	maps.Copy(refused, st.Refused)
	return &admin.ReplicaSyncJSON{Replica: strconv.FormatUint(s.replicaSync.ID(), 16), Transport: s.replicaSyncTransport,
		Peers: st.Peers, Requests: st.Requests, Batches: st.Batches, Events: st.Events, Gaps: st.Gaps,
		Expired: st.Expired, Dropped: st.Dropped, Refused: refused}
}

// followPeerService follows epp.peer_service: the Service's ready
// endpoints in this Pod's namespace (POD_NAMESPACE, else the service
// account's), this Pod's addresses (POD_IP, POD_IPS) left out, on the
// replica-sync port, followed beside epp.replica_peers.
func (s *Server) followPeerService(cfg *config.Config, o Options) error {
	e := cfg.EPP
	lookup := o.lookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	ns := peerservice.NamespaceFromEnvironment(lookup)
	if ns == "" && cfg.Dynamo.Discovery.Source != config.SourceEtcd {
		ns = cfg.Dynamo.Discovery.Kubernetes.Namespace
	}
	if ns == "" {
		return fmt.Errorf("epp.peer_service: this Pod's namespace is unknown: set POD_NAMESPACE (the downward API's metadata.namespace)")
	}
	_, portStr, err := net.SplitHostPort(s.replicaSync.Addr())
	if err != nil {
		return err
	}
	port, _ := strconv.Atoi(portStr)
	static := slices.Clone(e.ReplicaPeers)
	rs := s.replicaSync
	w, err := peerservice.Start(peerservice.Options{Namespace: ns, Service: e.PeerService, Port: port,
		Self: peerservice.SelfFromEnvironment(lookup), REST: o.kubeREST, Log: s.log.With("component", "replica_sync"),
		Set: func(found []string) {
			peers := slices.Clone(static)
			for _, p := range found {
				if !slices.Contains(peers, p) {
					peers = append(peers, p)
				}
			}
			rs.SetPeers(peers)
		}})
	if err != nil {
		return err
	}
	s.peerService = w
	s.log.Info("replica sync: peers from a Service", "namespace", ns, "service", e.PeerService, "port", port)
	return nil
}
