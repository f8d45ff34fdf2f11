package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/router/config"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestBrokerDiscoveryConfig(t *testing.T) {
	f := brokerFlags{namespaces: []string{"dynamo"}}
	c, err := f.discoveryConfig(envOf(nil))
	require.NoError(t, err)
	require.Equal(t, config.SourceEtcd, c.Dynamo.Discovery.Source)
	require.Equal(t, []string{DefaultBrokerEtcd}, c.Dynamo.Discovery.Etcd.Endpoints)
	require.Equal(t, "dynamo", c.Dynamo.Discovery.Etcd.Namespace)

	c, err = f.discoveryConfig(envOf(map[string]string{"ETCD_ENDPOINTS": "etcd-0:2379,etcd-1:2379"}))
	require.NoError(t, err)
	require.Equal(t, []string{"etcd-0:2379", "etcd-1:2379"}, c.Dynamo.Discovery.Etcd.Endpoints)

	two := brokerFlags{namespaces: []string{"a", "b"}, etcdEndpoints: []string{"e:2379"}}
	c, err = two.discoveryConfig(envOf(map[string]string{"ETCD_ENDPOINTS": "ignored:1"}))
	require.NoError(t, err)
	require.Equal(t, []string{"e:2379"}, c.Dynamo.Discovery.Etcd.Endpoints, "the flag wins over the variable")
	require.Equal(t, []string{"a", "b"}, c.Dynamo.Discovery.Etcd.Namespaces)

	c, err = f.discoveryConfig(envOf(map[string]string{"DYN_DISCOVERY_BACKEND": "kubernetes", "POD_NAMESPACE": "gpu"}))
	require.NoError(t, err)
	require.Equal(t, config.SourceKubernetes, c.Dynamo.Discovery.Source)
	require.Equal(t, "gpu", c.Dynamo.Discovery.Kubernetes.Namespace)
	require.Equal(t, []string{"dynamo"}, c.Dynamo.Discovery.Kubernetes.DynamoNamespaces)

	_, err = brokerFlags{namespaces: []string{"dynamo"}, source: "consul"}.discoveryConfig(envOf(nil))
	require.Error(t, err)
}

// The token file is re-read at every call (a rotated Secret) and trimmed;
// without a file the variable is read.
func TestBrokerToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte("first\n"), 0o600))
	tok := brokerFlags{tokenFile: path}.token()
	got, err := tok()
	require.NoError(t, err)
	require.Equal(t, "first", got)
	require.NoError(t, os.WriteFile(path, []byte("second"), 0o600))
	got, _ = tok()
	require.Equal(t, "second", got)
	require.NoError(t, os.Remove(path))
	_, err = tok()
	require.Error(t, err, "a missing token file is an error, not an empty token")

	t.Setenv("SWITCHYARD_TEST_BUS_TOKEN", "from-env")
	got, err = brokerFlags{tokenEnv: "SWITCHYARD_TEST_BUS_TOKEN"}.token()()
	require.NoError(t, err)
	require.Equal(t, "from-env", got)
}

func TestBrokerCommandRefusesBadFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"no bus url":       {"broker", "--client-id", "b"},
		"no client id":     {"broker", "--bus-url", "https://127.0.0.1:7443"},
		"plain http":       {"broker", "--bus-url", "http://127.0.0.1:7443", "--client-id", "b", "--metrics-listen", ""},
		"cert without key": {"broker", "--bus-url", "https://127.0.0.1:7443", "--client-id", "b", "--cert-file", "x.crt"},
		"unreadable ca":    {"broker", "--bus-url", "https://127.0.0.1:7443", "--client-id", "b", "--ca-file", "/nonexistent/ca.crt"},
		"bad discovery":    {"broker", "--bus-url", "https://127.0.0.1:7443", "--client-id", "b", "--discovery", "consul"},
		"too many streams": {"broker", "--bus-url", "https://127.0.0.1:7443", "--client-id", "b", "--max-streams", "0"},
	} {
		cmd := newRootCmd()
		cmd.SetArgs(args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		require.Error(t, cmd.Execute(), name)
	}
}
