package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

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
	if e.ReplicaSync {
		k.replicaSync(c)
	}
}

// replicaSync checks the replica-sync settings of a replica with sync on.
func (k *checker) replicaSync(c *Config) {
	e := c.EPP
	const p = "epp"
	if kv := c.Dynamo.KV; !kv.TrackActiveBlocks && !kv.TrackPrefillTokens && kv.DecodeActiveRequestWeight == 0 {
		k.warn(p+".replica_sync", "on, but no active-sequence tracking is (dynamo.kv.track_active_blocks, track_prefill_tokens): this replica publishes only heartbeats and does not apply its peers' requests")
	}
	switch e.ReplicaSyncTransport {
	case ReplicaSyncZMQ:
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
			k.errIf(p+".peer_service", labelProblem(e.PeerService))
			if _, port, err := net.SplitHostPort(e.ReplicaSyncListen); err == nil && port == "0" {
				k.err(p+".replica_sync_listen", "a fixed port is needed with peer_service: the peers found through the Service are dialled on it")
			}
		}
		if len(e.ReplicaPeers) == 0 && e.PeerService == "" {
			k.warn(p+".replica_peers", "replica_sync is on but no peers are listed: this replica publishes and follows nobody")
		}
		if e.ReplicaSyncNATSURL != "" {
			k.err(p+".replica_sync_nats_url", "set, but replica_sync_transport is zmq: set the transport to nats, or remove the URL")
		}
	case ReplicaSyncNATS:
		k.errIf(p+".replica_sync_nats_url", natsURLProblem(e.ReplicaSyncNATSURL))
		if len(e.ReplicaPeers) > 0 {
			k.err(p+".replica_peers", "listed, but over NATS every replica reaches its peers through the server's subject: remove them, or use replica_sync_transport: zmq")
		}
		if e.PeerService != "" {
			k.err(p+".peer_service", "set, but over NATS peers are not dialled: remove it, or use replica_sync_transport: zmq")
		}
		if pr := natsSubjectTokenProblem(c.Dynamo.Discovery.Etcd.Namespace); pr != "" {
			k.err("dynamo.discovery.etcd.namespace", "names the replica-sync NATS subject switchyard.replica_sync.<namespace>, so it %s", pr)
		}
	default:
		k.err(p+".replica_sync_transport", "must be zmq or nats, got %q", e.ReplicaSyncTransport)
	}
}

// maxNATSServers bounds the servers of replica_sync_nats_url.
const maxNATSServers = 16

// natsURLProblem checks a NATS server URL, or a comma-separated list of
// them: nats or tls scheme, a host, no credentials (authentication is not
// in this build), no path or query.
func natsURLProblem(s string) string {
	if strings.TrimSpace(s) == "" {
		return "must name the NATS server (nats://host:4222) with replica_sync_transport: nats"
	}
	parts := strings.Split(s, ",")
	if len(parts) > maxNATSServers {
		return fmt.Sprintf("at most %d servers, got %d", maxNATSServers, len(parts))
	}
	for _, raw := range parts {
		raw = strings.TrimSpace(raw)
		u, err := url.Parse(raw)
		switch {
		case err != nil || raw == "":
			return fmt.Sprintf("%q is not a valid URL", raw)
		case u.Scheme != "nats" && u.Scheme != "tls":
			return fmt.Sprintf("%q: the scheme must be nats:// or tls://", raw)
		case u.User != nil:
			return fmt.Sprintf("%q carries credentials: NATS authentication is not in this build", u.Redacted())
		case u.Hostname() == "":
			return fmt.Sprintf("%q names no host", raw)
		case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
			return fmt.Sprintf("%q: a NATS URL has no path, query or fragment", raw)
		}
		if port := u.Port(); port != "" {
			if pr := checkHostPort(u.Host, false); pr != "" {
				return fmt.Sprintf("%q: %s", raw, pr)
			}
		}
	}
	return ""
}

// natsSubjectTokenProblem checks that a namespace makes a usable NATS
// subject after "switchyard.replica_sync.": dot-separated non-empty
// tokens without the wildcards '*' and '>' (whitespace is refused for
// every namespace already).
func natsSubjectTokenProblem(ns string) string {
	for tok := range strings.SplitSeq(ns, ".") {
		switch {
		case tok == "":
			return "must not start or end with a dot, nor hold two in a row"
		case tok == "*" || tok == ">":
			return "must not hold a NATS wildcard ('*' or '>' alone between dots)"
		}
	}
	return ""
}
