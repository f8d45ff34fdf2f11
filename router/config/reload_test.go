package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestDiscoveryChange(t *testing.T) {
	etcdOn := func(c *Config) {
		c.Dynamo.Enabled = true
		c.Dynamo.Discovery.Etcd.Endpoints = []string{"http://etcd:2379"}
	}
	podsOn := func(c *Config) {
		c.Dynamo.Enabled = true
		c.Dynamo.Discovery.Source = SourceKubernetesPods
		c.Dynamo.Discovery.Kubernetes.Namespace = "dynamo"
		c.Dynamo.Discovery.Kubernetes.DynamoNamespaces = []string{"a", "b"}
		c.Dynamo.Discovery.Kubernetes.Models = []ComponentModel{
			{Component: "w", Model: "m1", DynamoNamespace: "a"},
			{Component: "w", Model: "m2", DynamoNamespace: "b"},
		}
	}
	metadataOn := func(c *Config) {
		podsOn(c)
		c.Dynamo.Discovery.Source = SourceKubernetes
	}
	none := DiscoveryReload{}
	cases := []struct {
		name string
		base func(*Config)
		edit func(*Config)
		want DiscoveryReload
	}{
		{"both disabled", nil, func(c *Config) { c.Dynamo.Discovery.Etcd.Namespace = "x" }, none},
		{"enable", nil, etcdOn, DiscoveryReload{ReloadStart, ReasonEnabled}},
		{"disable", etcdOn, func(c *Config) { c.Dynamo.Enabled = false }, DiscoveryReload{ReloadStop, ReasonEnabled}},
		{"unchanged", etcdOn, func(*Config) {}, none},
		{"non-discovery edits", etcdOn, func(c *Config) {
			c.Dynamo.Load.MaxStaleness = Duration(time.Second)
			c.Dynamo.Shim.Backends = []string{"x"}
			c.Dynamo.KV.Enabled = true
			c.Admin.Token = "t"
		}, none},
		{"source", etcdOn, podsOn, DiscoveryReload{ReloadReplace, ReasonSource}},
		{"source back", podsOn, func(c *Config) { c.Dynamo.Discovery.Source = SourceEtcd }, DiscoveryReload{ReloadReplace, ReasonSource}},

		{"etcd endpoints", etcdOn, func(c *Config) { c.Dynamo.Discovery.Etcd.Endpoints = []string{"http://etcd-2:2379"} }, DiscoveryReload{ReloadReplace, ReasonConnection}},
		{"etcd bare endpoint spelled as url", etcdOn, func(c *Config) { c.Dynamo.Discovery.Etcd.Endpoints = []string{"etcd:2379"} }, none},
		{"etcd tls", etcdOn, func(c *Config) { c.Dynamo.Discovery.Etcd.TLS = &EtcdTLS{CACert: "/ca"} }, DiscoveryReload{ReloadReplace, ReasonConnection}},
		{"etcd auth", etcdOn, func(c *Config) { c.Dynamo.Discovery.Etcd.Auth = &EtcdAuth{Username: "u"} }, DiscoveryReload{ReloadReplace, ReasonConnection}},
		{"etcd embedded", etcdOn, func(c *Config) { c.Dynamo.Discovery.Etcd.Embedded.DataDir = "/d" }, DiscoveryReload{ReloadReplace, ReasonConnection}},
		{"etcd namespace", etcdOn, func(c *Config) { c.Dynamo.Discovery.Etcd.Namespace = "other" }, DiscoveryReload{ReloadReplace, ReasonNamespace}},
		{"etcd namespace to disjoint list", etcdOn, func(c *Config) { c.Dynamo.Discovery.Etcd.Namespaces = []string{"a", "b"} }, DiscoveryReload{ReloadReplace, ReasonNamespace}},
		{"etcd add namespace", etcdOn, func(c *Config) { c.Dynamo.Discovery.Etcd.Namespaces = []string{"dynamo", "canary"} }, DiscoveryReload{ReloadPrune, ReasonNamespaces}},
		{"etcd remove namespace", func(c *Config) { etcdOn(c); c.Dynamo.Discovery.Etcd.Namespaces = []string{"a", "b"} },
			func(c *Config) { c.Dynamo.Discovery.Etcd.Namespaces = []string{"b"} }, DiscoveryReload{ReloadPrune, ReasonNamespaces}},
		{"etcd namespaces and connection", etcdOn, func(c *Config) {
			c.Dynamo.Discovery.Etcd.Namespaces = []string{"dynamo", "canary"}
			c.Dynamo.Discovery.Etcd.Endpoints = []string{"http://etcd-2:2379"}
		}, DiscoveryReload{ReloadReplace, ReasonConnection}},
		{"etcd backoff only", etcdOn, func(c *Config) { c.Dynamo.Discovery.Etcd.WatchReconnectBackoff.Max = Duration(time.Minute) }, DiscoveryReload{ReloadReplaceKeepSnapshot, ReasonBackoff}},
		{"etcd backoff and namespace", etcdOn, func(c *Config) {
			c.Dynamo.Discovery.Etcd.WatchReconnectBackoff.Max = Duration(time.Minute)
			c.Dynamo.Discovery.Etcd.Namespace = "other"
		}, DiscoveryReload{ReloadReplace, ReasonNamespace}},
		{"kubernetes block under etcd", etcdOn, func(c *Config) { c.Dynamo.Discovery.Kubernetes.Namespace = "x" }, none},

		{"pods namespace", podsOn, func(c *Config) { c.Dynamo.Discovery.Kubernetes.Namespace = "other" }, DiscoveryReload{ReloadReplace, ReasonNamespace}},
		{"pods dynamo_namespace", func(c *Config) {
			podsOn(c)
			c.Dynamo.Discovery.Kubernetes.DynamoNamespaces, c.Dynamo.Discovery.Kubernetes.DynamoNamespace = nil, "a"
			c.Dynamo.Discovery.Kubernetes.Models, c.Dynamo.Discovery.Kubernetes.Model = nil, "m"
		}, func(c *Config) { c.Dynamo.Discovery.Kubernetes.DynamoNamespace = "z" }, DiscoveryReload{ReloadReplace, ReasonNamespace}},
		{"pods remove namespace", podsOn, func(c *Config) {
			c.Dynamo.Discovery.Kubernetes.DynamoNamespaces = []string{"a"}
			c.Dynamo.Discovery.Kubernetes.Models = c.Dynamo.Discovery.Kubernetes.Models[:1]
		}, DiscoveryReload{ReloadPrune, ReasonNamespaces}},
		{"pods add namespace", podsOn, func(c *Config) {
			c.Dynamo.Discovery.Kubernetes.DynamoNamespaces = []string{"a", "b", "c"}
			c.Dynamo.Discovery.Kubernetes.Models = append(c.Dynamo.Discovery.Kubernetes.Models, ComponentModel{Component: "w", Model: "m3", DynamoNamespace: "c"})
		}, DiscoveryReload{ReloadPrune, ReasonNamespaces}},
		{"pods remove namespace and change kept model", podsOn, func(c *Config) {
			c.Dynamo.Discovery.Kubernetes.DynamoNamespaces = []string{"a"}
			c.Dynamo.Discovery.Kubernetes.Models = []ComponentModel{{Component: "w", Model: "changed", DynamoNamespace: "a"}}
		}, DiscoveryReload{ReloadReplace, ReasonOther}},
		{"pods single to list keeping models", func(c *Config) {
			podsOn(c)
			c.Dynamo.Discovery.Kubernetes.DynamoNamespaces, c.Dynamo.Discovery.Kubernetes.DynamoNamespace = nil, "a"
			c.Dynamo.Discovery.Kubernetes.Models = []ComponentModel{{Component: "w", Model: "m1"}}
		}, func(c *Config) {
			c.Dynamo.Discovery.Kubernetes.DynamoNamespace, c.Dynamo.Discovery.Kubernetes.DynamoNamespaces = "", []string{"a", "b"}
			c.Dynamo.Discovery.Kubernetes.Models = []ComponentModel{{Component: "w", Model: "m1", DynamoNamespace: "a"}, {Component: "w", Model: "m2", DynamoNamespace: "b"}}
		}, DiscoveryReload{ReloadPrune, ReasonNamespaces}},
		{"pods models", podsOn, func(c *Config) { c.Dynamo.Discovery.Kubernetes.Models[0].Model = "changed" }, DiscoveryReload{ReloadReplace, ReasonOther}},
		{"pods model", podsOn, func(c *Config) { c.Dynamo.Discovery.Kubernetes.Models, c.Dynamo.Discovery.Kubernetes.Model = nil, "m" }, DiscoveryReload{ReloadReplace, ReasonOther}},
		{"pods backoff only", podsOn, func(c *Config) { c.Dynamo.Discovery.Kubernetes.WatchReconnectBackoff.Initial = Duration(time.Second) }, DiscoveryReload{ReloadReplaceKeepSnapshot, ReasonBackoff}},
		{"etcd block under pods", podsOn, func(c *Config) { c.Dynamo.Discovery.Etcd.Endpoints = []string{"http://x:1"} }, none},

		{"metadata models are ignored", metadataOn, func(c *Config) { c.Dynamo.Discovery.Kubernetes.Models[0].Model = "changed" }, none},
		{"metadata model is ignored", metadataOn, func(c *Config) { c.Dynamo.Discovery.Kubernetes.Model = "m" }, none},
		{"metadata remove namespace with model edits", metadataOn, func(c *Config) {
			c.Dynamo.Discovery.Kubernetes.DynamoNamespaces = []string{"a"}
			c.Dynamo.Discovery.Kubernetes.Models = nil
		}, DiscoveryReload{ReloadPrune, ReasonNamespaces}},
		{"metadata namespace", metadataOn, func(c *Config) { c.Dynamo.Discovery.Kubernetes.Namespace = "other" }, DiscoveryReload{ReloadReplace, ReasonNamespace}},
		{"metadata disjoint namespaces", metadataOn, func(c *Config) { c.Dynamo.Discovery.Kubernetes.DynamoNamespaces = []string{"x"} }, DiscoveryReload{ReloadReplace, ReasonNamespace}},
		{"metadata backoff only", metadataOn, func(c *Config) { c.Dynamo.Discovery.Kubernetes.WatchReconnectBackoff.Max = Duration(time.Hour) }, DiscoveryReload{ReloadReplaceKeepSnapshot, ReasonBackoff}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := Default()
			if tc.base != nil {
				tc.base(old)
			}
			new := old.Clone()
			tc.edit(new)
			assert.Equal(t, tc.want, DiscoveryChange(old, new))
		})
	}
}

func TestDiscoveryChangeNil(t *testing.T) {
	on := Default()
	on.Dynamo.Enabled = true
	assert.Equal(t, DiscoveryReload{ReloadStart, ReasonEnabled}, DiscoveryChange(nil, on))
	assert.Equal(t, DiscoveryReload{ReloadStop, ReasonEnabled}, DiscoveryChange(on, nil))
	assert.Equal(t, DiscoveryReload{}, DiscoveryChange(nil, nil))
}

func TestReloadActionString(t *testing.T) {
	for a, s := range map[ReloadAction]string{
		ReloadNone: "none", ReloadStart: "start", ReloadStop: "stop", ReloadReplace: "replace",
		ReloadReplaceKeepSnapshot: "replace_keep_snapshot", ReloadPrune: "prune", ReloadAction(99): "unknown",
	} {
		assert.Equal(t, s, a.String())
	}
}

func TestReloadRefusal(t *testing.T) {
	on := func() *Config {
		c := Default()
		c.Dynamo.Enabled = true
		c.Admin.Token = "admin-token-0123456789"
		c.Backends = []Backend{DefaultBackend()}
		return c
	}
	cases := []struct {
		name   string
		old    func() *Config
		mutate func(*Config)
		want   string
	}{
		{"same", on, func(*Config) {}, ""},
		{"token changed", on, func(c *Config) { c.Admin.Token = "another-token-0123456789" }, ""},
		{"a backend removed of two", func() *Config { c := on(); c.Backends = append(c.Backends, DefaultBackend()); return c },
			func(c *Config) { c.Backends = c.Backends[:1] }, ""},
		{"every backend removed", on, func(c *Config) { c.Backends = nil }, "removes every backend"},
		{"dynamo disabled", on, func(c *Config) { c.Dynamo.Enabled = false }, "disables Dynamo"},
		{"admin switched off", on, func(c *Config) { c.Admin.Token = "" }, "admin API off"},
		{"all defaults", on, func(c *Config) { *c = *Default() }, "removes every backend"},
		{"off stays off", Default, func(*Config) {}, ""},
		{"turning things on", Default, func(c *Config) { *c = *on() }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := tc.old()
			next := old.Clone()
			tc.mutate(next)
			got := ReloadRefusal(old, next)
			if tc.want == "" {
				assert.Empty(t, got)
			} else {
				assert.Contains(t, got, tc.want)
			}
		})
	}
}
