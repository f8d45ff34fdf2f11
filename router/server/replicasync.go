package server

import (
	"maps"
	"strconv"

	"switchyard/router/admin"
	"switchyard/router/config"
	"switchyard/router/core"
	"switchyard/router/replicasync"
)

// newReplicaSync binds the replica-sync PUB socket when epp.replica_sync
// asks for it and points the core's hooks at it: the replica's own
// changes are published, peers' gaps and refusals counted. It takes effect
// at start only.
func (s *Server) newReplicaSync(cfg *config.Config, hooks *core.Hooks) error {
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
