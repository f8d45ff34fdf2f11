package server

import (
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
	s.replicaSync = rs
	hooks.Sync, hooks.PeerGap, hooks.PeerRefused = rs.Publish, m.CountGap, m.CountRefused
	if e.ReplicaSyncTransport == config.ReplicaSyncNATS {
		s.log.Info("replica sync on", "replica", rs.ID(), "transport", "nats", "subject", rs.Topic())
	} else {
		s.log.Info("replica sync on", "replica", rs.ID(), "transport", "zmq", "listen", rs.Addr(), "peers", len(e.ReplicaPeers))
	}
	return nil
}
