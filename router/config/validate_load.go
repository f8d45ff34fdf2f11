package config

import (
	"net/netip"
	"net/url"
	"time"
)

const (
	minMaxStaleness  = Duration(100 * time.Millisecond)
	maxMaxStaleness  = Duration(5 * time.Minute)
	maxAllowCIDRs    = 64
	allowCIDRExample = "10.0.0.0/8"
)

func (k *checker) load(c *Config) {
	const p = "dynamo.load"
	l := c.Dynamo.Load
	if l.MaxStaleness < minMaxStaleness || l.MaxStaleness > maxMaxStaleness {
		k.err(p+".max_staleness", "must be between %s and %s, got %s", minMaxStaleness, maxMaxStaleness, l.MaxStaleness)
	}
	switch l.Transport {
	case TransportDirect, TransportBroker:
	default:
		k.err(p+".transport", "must be direct or broker, got %q", l.Transport)
	}
	k.uniqueList(p+".direct_allow_cidrs", l.DirectAllowCIDRs, maxAllowCIDRs, func(s string) string {
		if _, err := netip.ParsePrefix(s); err != nil {
			return "must be an IPv4 or IPv6 CIDR such as " + allowCIDRExample
		}
		return ""
	})
	if !c.Dynamo.Enabled {
		return
	}
	if l.Transport == TransportBroker && !c.Dynamo.EventBus.Enabled {
		k.warn(p+".transport", "broker needs dynamo.event_bus.enabled: without a listener every subscription stays pending")
	}
	if l.Transport != TransportDirect {
		return
	}
	if len(l.DirectAllowCIDRs) == 0 {
		k.warn(p+".direct_allow_cidrs", "unset: direct mode may dial any address a publisher record names; list the worker Pod CIDRs (e.g. %s)", allowCIDRExample)
	}
	if c.Dynamo.Discovery.Source == SourceEtcd && !c.Dynamo.Discovery.Etcd.Embedded.Enabled {
		for i, raw := range c.Dynamo.Discovery.Etcd.Endpoints {
			u, err := url.Parse(normalizeEndpoint(raw))
			if err != nil || u.Hostname() == "" || !appearsExternal(u.Hostname()) {
				continue
			}
			k.warn(index("dynamo.discovery.etcd.endpoints", i), "host %s appears external to the cluster, but dynamo.load.transport is direct, which dials worker Pod addresses; use transport broker when the router runs outside the cluster", u.Hostname())
		}
	}
}
