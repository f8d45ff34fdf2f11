package config

import "fmt"

// maxKVCacheBlockSize bounds epp.kv_cache_block_size; engines use a few
// dozen tokens per block, never this many.
const maxKVCacheBlockSize = 1 << 16

// maxReplicaPeers bounds epp.replica_peers (the core follows at most 64
// peers).
const maxReplicaPeers = 64

func (k *checker) epp(c *Config) {
	e := c.EPP
	if !e.Enabled {
		return
	}
	const p = "epp"
	k.errIf(p+".listen", checkHostPort(e.Listen, true))
	if e.HealthListen != "" {
		k.errIf(p+".health_listen", checkHostPort(e.HealthListen, true))
		if sameListener(e.HealthListen, e.Listen) {
			k.err(p+".health_listen", "collides with epp.listen (%s)", e.Listen)
		}
		if sameListener(e.HealthListen, c.Server.BindAddress) {
			k.err(p+".health_listen", "collides with server.bind_address (%s)", c.Server.BindAddress)
		}
	}
	if !c.Dynamo.Enabled {
		k.err("dynamo.enabled", "must be true with epp.enabled: the endpoint picker's workers come from Dynamo discovery")
	}
	if e.Plaintext && (e.CertFile != "" || e.KeyFile != "") {
		k.err(p+".plaintext", "true beside cert_file/key_file: choose TLS with the files, or plaintext")
	}
	if (e.CertFile == "") != (e.KeyFile == "") {
		k.err(p+".cert_file", "cert_file and key_file go together (both empty: a self-signed certificate)")
	}
	switch e.Mode {
	case EPPModeDynamo:
	case EPPModeStandalone:
		k.standalone(c)
	default:
		k.err(p+".mode", "must be dynamo or standalone, got %q", e.Mode)
	}
	switch {
	case e.FallbackEndpoints < 0 || e.FallbackEndpoints > MaxFallbackEndpoints:
		k.err(p+".fallback_endpoints", "must be between 0 and %d, got %d", MaxFallbackEndpoints, e.FallbackEndpoints)
	case e.FallbackEndpoints > 0 && e.Mode != EPPModeStandalone:
		k.err(p+".fallback_endpoints", "needs epp.mode standalone: in dynamo mode every endpoint in the list would receive the first pick's worker pins, so a fallback would still reach the first worker")
	}
	if e.TargetPort < 1 || e.TargetPort > 65535 {
		k.err(p+".target_port", "must be a port between 1 and 65535, got %d", e.TargetPort)
	}
	switch e.RequestBodyMode {
	case BodyModeFullDuplexStreamed, BodyModeBuffered:
	default:
		k.err(p+".request_body_mode", "must be full_duplex_streamed or buffered, got %q", e.RequestBodyMode)
	}
	if e.KVCacheBlockSize < 0 || e.KVCacheBlockSize > maxKVCacheBlockSize {
		k.err(p+".kv_cache_block_size", "must be between 0 (from the cards) and %d, got %d", maxKVCacheBlockSize, e.KVCacheBlockSize)
	}
	// What the router does not do yet is refused rather than ignored: a
	// setting that silently changed nothing would mislead.
	notYet := func(field, what string) {
		k.err(p+"."+field, "%s is not in this build yet; leave it at its default", what)
	}
	if e.ReplicaSync {
		k.errIf(p+".replica_sync_listen", checkHostPort(e.ReplicaSyncListen, true))
		for _, l := range []struct{ name, addr string }{{"epp.listen", e.Listen}, {"server.bind_address", c.Server.BindAddress}} {
			if sameListener(e.ReplicaSyncListen, l.addr) {
				k.err(p+".replica_sync_listen", "collides with %s (%s)", l.name, l.addr)
			}
		}
		if len(e.ReplicaPeers) > maxReplicaPeers {
			k.err(p+".replica_peers", "at most %d peers, got %d", maxReplicaPeers, len(e.ReplicaPeers))
		}
		for i, a := range e.ReplicaPeers {
			k.errIf(fmt.Sprintf("%s.replica_peers[%d]", p, i), checkHostPort(a, false))
		}
		if e.PeerService != "" {
			notYet("peer_service", "finding replica-sync peers through a Kubernetes Service")
		}
		if len(e.ReplicaPeers) == 0 && e.PeerService == "" {
			k.warn(p+".replica_peers", "replica_sync is on but no peers are listed: this replica publishes and follows nobody")
		}
	}
}
