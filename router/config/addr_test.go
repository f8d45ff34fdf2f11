package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEffectiveEndpoints(t *testing.T) {
	e := EtcdDiscovery{Endpoints: []string{"etcd-0:2379", "https://etcd-1:2379", "[::1]:2379"}}
	assert.Equal(t, []string{"http://etcd-0:2379", "https://etcd-1:2379", "http://[::1]:2379"}, e.EffectiveEndpoints())
	e.Embedded = EmbeddedEtcd{Enabled: true, Listen: "127.0.0.1:23790"}
	e.Endpoints = nil
	assert.Equal(t, []string{"http://127.0.0.1:23790"}, e.EffectiveEndpoints())
	// The running process may fill in the address it actually bound.
	e.Embedded.Listen = "127.0.0.1:0"
	e.Endpoints = []string{"http://127.0.0.1:41234"}
	assert.Equal(t, []string{"http://127.0.0.1:41234"}, e.EffectiveEndpoints())
	assert.Empty(t, EtcdDiscovery{}.EffectiveEndpoints())
}

func TestDiscoveryNamespaces(t *testing.T) {
	d := Default().Dynamo.Discovery
	assert.Equal(t, []string{"dynamo"}, d.Namespaces())
	d.Etcd.Namespaces = []string{"prod", "canary"}
	assert.Equal(t, []string{"prod", "canary"}, d.Namespaces())

	d.Source = SourceKubernetesPods
	assert.Nil(t, d.Namespaces(), "no dynamo_namespace set")
	d.Kubernetes.DynamoNamespace = "graph-a"
	assert.Equal(t, []string{"graph-a"}, d.Namespaces())
	d.Source = SourceKubernetes
	d.Kubernetes.DynamoNamespaces = []string{"a", "b"}
	assert.Equal(t, []string{"a", "b"}, d.Namespaces())
}

func TestSameListener(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:80", "127.0.0.1:80", true},
		{"127.0.0.1:80", "127.0.0.1:81", false},
		{":80", "10.0.0.1:80", true},
		{"0.0.0.0:80", "127.0.0.1:80", true},
		{"[::]:80", "127.0.0.1:80", true},
		{"localhost:80", "[::1]:80", true},
		{"LOCALHOST:80", "localhost:80", true},
		{"10.0.0.1:80", "10.0.0.2:80", false},
		{"127.0.0.1:0", "127.0.0.1:0", false},
		{"bad", "bad", false},
	} {
		assert.Equal(t, tc.want, sameListener(tc.a, tc.b), "%s vs %s", tc.a, tc.b)
	}
}

func TestAppearsExternal(t *testing.T) {
	for host, want := range map[string]bool{
		"10.0.0.1": false, "192.168.1.1": false, "172.16.0.1": false, "127.0.0.1": false,
		"::1": false, "fd00::1": false, "fe80::1": false, "169.254.1.1": false,
		"localhost": false, "etcd": false, "etcd.dynamo.svc": false, "etcd.dynamo.svc.cluster.local": false,
		"etcd.corp.internal": false, "ETCD.DYNAMO.SVC.": false,
		"8.8.8.8": true, "2001:4860::8888": true, "etcd.example.com": true, "etcd.dynamo": true,
	} {
		assert.Equal(t, want, appearsExternal(host), host)
	}
}
