package config

import "math"

// streamBufferFloor is the smallest per-stream share of the session buffer
// (four reservations of 16 KiB each).
const streamBufferFloor = 64 << 10

func (k *checker) eventBus(c *Config) {
	const p = "dynamo.event_bus"
	b := c.Dynamo.EventBus
	if b.Enabled {
		k.errIf(p+".listen", checkHostPort(b.Listen, true))
		if b.TLS.Cert == "" {
			k.err(p+".tls.cert", "required: the listener speaks TLS only")
		}
		if b.TLS.Key == "" {
			k.err(p+".tls.key", "required: the listener speaks TLS only")
		}
		if len(b.Brokers) == 0 {
			k.warn(p+".brokers", "empty: no broker or kv_listener can authenticate, so every session is refused")
		}
	}
	k.busClients(c)

	if b.MaxSessions < 1 {
		k.err(p+".max_sessions", "must be at least 1, got %d", b.MaxSessions)
	}
	if b.MaxStreamsPerSession < 1 {
		k.err(p+".max_streams_per_session", "must be at least 1, got %d", b.MaxStreamsPerSession)
	} else if need := int64(b.MaxStreamsPerSession) * streamBufferFloor; b.MaxSessionBufferBytes < need {
		k.err(p+".max_session_buffer_bytes", "must be >= max_streams_per_session * 64 KiB (%d), got %d", need, b.MaxSessionBufferBytes)
	}
	// The session buffer is also the HTTP/2 connection window, which the
	// protocol caps at 2^31-1.
	if b.MaxSessionBufferBytes > math.MaxInt32 {
		k.err(p+".max_session_buffer_bytes", "must be at most %d (the largest HTTP/2 window), got %d", math.MaxInt32, b.MaxSessionBufferBytes)
	}
	if b.HeartbeatInterval <= 0 {
		k.err(p+".heartbeat_interval", "must be greater than 0")
	} else if b.IdleTimeout <= b.HeartbeatInterval {
		k.err(p+".idle_timeout", "must be longer than heartbeat_interval (%s), or healthy sessions time out between heartbeats; got %s", b.HeartbeatInterval, b.IdleTimeout)
	}
}

// busClients checks brokers[]: identities, credentials and grants.
func (k *checker) busClients(c *Config) {
	const p = "dynamo.event_bus.brokers"
	b := c.Dynamo.EventBus
	ids := map[string]int{}
	hashes := map[string]int{}
	for i, e := range b.Brokers {
		q := index(p, i)
		if msg := dnsNameProblem(e.ID); msg != "" {
			k.err(q+".id", "%s", msg)
		} else if j, dup := ids[e.ID]; dup {
			k.err(q+".id", "duplicate of %s.id", index(p, j))
		} else {
			ids[e.ID] = i
		}
		switch {
		case e.TokenHash == "" && b.TLS.ClientCA == "":
			k.err(q+".token_hash", "required unless tls.client_ca is set: otherwise this entry can never authenticate")
		case e.TokenHash == "":
		case !sha256TokenHash.MatchString(e.TokenHash):
			k.err(q+".token_hash", "must be \"sha256:\" followed by 64 lowercase hex digits (the hash of the token, never the token)")
		default:
			if j, dup := hashes[e.TokenHash]; dup {
				k.err(q+".token_hash", "same token as %s: a token must identify one entry", index(p, j))
			} else {
				hashes[e.TokenHash] = i
			}
		}
		switch e.Role {
		case BusRoleBroker:
			if len(e.Backends) > 0 {
				k.err(q+".backends", "only kv_listener entries take backends")
			}
			if len(e.Namespaces) == 0 {
				k.warn(q+".namespaces", "empty allowlist: this broker may announce any Dynamo namespace")
			}
			k.uniqueList(q+".namespaces", e.Namespaces, MaxNamespaces, namespaceProblem)
		case BusRoleKVListener:
			if len(e.Namespaces) > 0 {
				k.err(q+".namespaces", "kv_listener entries are granted backends, not namespaces")
			}
			if len(e.Backends) == 0 {
				k.err(q+".backends", "a kv_listener entry needs at least one granted backend")
			}
			k.uniqueList(q+".backends", e.Backends, 0, func(s string) string {
				if s == "" {
					return "must not be empty"
				}
				return ""
			})
		default:
			k.err(q+".role", "must be broker or kv_listener, got %q", e.Role)
		}
	}
}
