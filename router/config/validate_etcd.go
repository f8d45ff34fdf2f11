package config

const (
	maxEtcdEndpoints = 16
	// MaxNamespaces caps the Dynamo namespaces one router watches; metric
	// label cardinality relies on it.
	MaxNamespaces = 16
)

func (k *checker) etcd(c *Config) {
	const p = "dynamo.discovery.etcd"
	e := c.Dynamo.Discovery.Etcd
	active := c.Dynamo.Enabled && c.Dynamo.Discovery.Source == SourceEtcd

	if e.Embedded.Enabled {
		k.errIf(p+".embedded.listen", checkHostPort(e.Embedded.Listen, false))
		if len(e.Endpoints) > 0 {
			k.err(p+".endpoints", "must be empty when embedded.enabled is true: the embedded server at embedded.listen is the endpoint")
		}
	} else if active && len(e.Endpoints) == 0 {
		k.err(p+".endpoints", "at least one endpoint is required when dynamo.enabled is true and the source is etcd (or set embedded.enabled)")
	}
	if len(e.Endpoints) > maxEtcdEndpoints {
		k.err(p+".endpoints", "at most %d entries, got %d", maxEtcdEndpoints, len(e.Endpoints))
	}

	schemes := map[string]bool{}
	if e.Embedded.Enabled {
		schemes["http"] = true // the embedded server speaks plaintext
	}
	for i, raw := range e.Endpoints {
		u, msg := parseEndpoint(raw)
		if msg != "" {
			k.err(index(p+".endpoints", i), "%s", msg)
			continue
		}
		schemes[u.Scheme] = true
	}
	if schemes["http"] && schemes["https"] {
		k.err(p+".endpoints", "cannot mix http:// and https:// endpoints")
	}
	if schemes["http"] && e.TLS != nil {
		k.err(p+".tls", "cannot be combined with http:// endpoints; use https:// (bare host:port means http://)")
	}
	if t := e.TLS; t != nil && (t.ClientCert == "") != (t.ClientKey == "") {
		k.err(p+".tls", "client_cert and client_key must be set together")
	}
	if a := e.Auth; a != nil {
		if a.Username == "" {
			k.err(p+".auth.username", "must not be empty when an auth block is present")
		}
		if schemes["http"] {
			k.warn(p+".auth", "sent over plaintext http://: the Authenticate RPC and session token travel unencrypted; use https:// with a tls block")
		}
	}

	k.errIf(p+".namespace", namespaceProblem(e.Namespace))
	if len(e.Namespaces) > 0 {
		k.uniqueList(p+".namespaces", e.Namespaces, MaxNamespaces, namespaceProblem)
		if e.Namespace != DefaultNamespace {
			k.err(p+".namespaces", "cannot be combined with a non-default namespace (%q); list every namespace in namespaces", e.Namespace)
		}
	}
	k.backoff(p+".watch_reconnect_backoff", e.WatchReconnectBackoff)
}
