package config

import "strings"

// Validate checks a parsed configuration. Errors make the file unusable;
// warnings describe settings that work but probably do not do what the
// operator wants. Both name the field they are about. The order is fixed
// (file order, map keys sorted), so output is stable across runs.
func (c *Config) Validate() (errs, warns []Issue) {
	k := &checker{}
	k.server(c)
	k.admin(c)
	k.gateway(c)
	k.apiKeys(c)
	k.backends(c)
	k.discoverySource(c)
	k.etcd(c)
	k.kubernetes(c)
	k.load(c)
	k.shim(c)
	k.kv(c)
	k.eventBus(c)
	k.epp(c)
	k.listeners(c)
	k.inactive(c)
	return k.errs, k.warns
}

func (k *checker) server(c *Config) {
	k.errIf("server.bind_address", checkHostPort(c.Server.BindAddress, true))
}

func (k *checker) admin(c *Config) {
	t := c.Admin.Token
	switch {
	case t == "":
		k.warn("admin.token", "empty: admin API disabled")
	case strings.TrimSpace(t) == "":
		k.err("admin.token", "must not be only whitespace (an unset ${VAR:-} default?)")
	case strings.ContainsFunc(t, isSpaceOrControl):
		k.err("admin.token", "must not contain whitespace or control characters; a bearer token cannot carry them")
	case len(t) < minKeyLength:
		k.warn("admin.token", "shorter than %d characters: easy to guess, and it guards the admin API and pprof", minKeyLength)
	}
}

func (k *checker) discoverySource(c *Config) {
	switch c.Dynamo.Discovery.Source {
	case SourceEtcd, SourceKubernetes, SourceKubernetesPods:
	case SourceInferencePool:
		k.inferencePool(c)
	default:
		k.err("dynamo.discovery.source", "must be etcd, kubernetes, kubernetes_pods or inference_pool, got %q", c.Dynamo.Discovery.Source)
	}
}

// backoff checks a watch_reconnect_backoff block.
func (k *checker) backoff(path string, b Backoff) {
	if b.Initial <= 0 {
		k.err(path+".initial", "must be greater than 0")
	}
	if b.Max <= 0 {
		k.err(path+".max", "must be greater than 0")
	} else if b.Max < b.Initial {
		k.err(path+".max", "must be >= initial (%s), got %s", b.Initial, b.Max)
	}
}

// listeners refuses two of our own listeners on one address.
func (k *checker) listeners(c *Config) {
	bind := c.Server.BindAddress
	bus := c.Dynamo.EventBus
	em := c.Dynamo.Discovery.Etcd.Embedded
	if bus.Enabled && sameListener(bus.Listen, bind) {
		k.err("dynamo.event_bus.listen", "collides with server.bind_address (%s); the event bus needs its own port", bind)
	}
	if em.Enabled && sameListener(em.Listen, bind) {
		k.err("dynamo.discovery.etcd.embedded.listen", "collides with server.bind_address (%s)", bind)
	}
	if ep := c.EPP; ep.Enabled {
		if sameListener(ep.Listen, bind) {
			k.err("epp.listen", "collides with server.bind_address (%s)", bind)
		}
		if bus.Enabled && sameListener(ep.Listen, bus.Listen) {
			k.err("epp.listen", "collides with dynamo.event_bus.listen (%s)", bus.Listen)
		}
		if em.Enabled && sameListener(ep.Listen, em.Listen) {
			k.err("epp.listen", "collides with dynamo.discovery.etcd.embedded.listen (%s)", em.Listen)
		}
	}
	if em.Enabled && bus.Enabled && sameListener(em.Listen, bus.Listen) {
		k.err("dynamo.discovery.etcd.embedded.listen", "collides with dynamo.event_bus.listen (%s)", bus.Listen)
	}
}
