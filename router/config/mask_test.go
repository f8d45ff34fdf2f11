package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func loadFull(t *testing.T) *Config {
	t.Helper()
	// Empty values select the file's ${VAR:-default}s whatever the
	// developer's environment holds.
	t.Setenv("ADMIN_TOKEN", "")
	t.Setenv("ETCD_PASSWORD", "")
	t.Setenv("TEAM_A_KEY", "")
	t.Setenv("OPS_KEY", "")
	c, err := Load("testdata/full.yaml")
	require.NoError(t, err)
	return c
}

func TestMaskedHidesSecretsOnly(t *testing.T) {
	c := loadFull(t)
	m := c.Masked()
	assert.Equal(t, Mask, m.Admin.Token)
	assert.Equal(t, Mask, m.Dynamo.Discovery.Etcd.Auth.Password)
	assert.Equal(t, Mask, m.Dynamo.Discovery.Etcd.TLS.ClientKey)
	assert.Equal(t, Mask, m.Dynamo.EventBus.TLS.Key)
	require.Len(t, m.APIKeys, 2)
	assert.Equal(t, Mask, m.APIKeys[0].Key)
	assert.Equal(t, Mask, m.APIKeys[1].Key)
	assert.Equal(t, []string{"frontend-prod"}, m.APIKeys[0].AllowedBackends, "grants stay readable")

	assert.Equal(t, "/etc/etcd/ca.pem", m.Dynamo.Discovery.Etcd.TLS.CACert, "ca_cert stays readable")
	assert.Equal(t, "/etc/etcd/client.pem", m.Dynamo.Discovery.Etcd.TLS.ClientCert, "client_cert stays readable")
	assert.Equal(t, "router", m.Dynamo.Discovery.Etcd.Auth.Username)
	assert.Equal(t, c.Dynamo.EventBus.TLS.Cert, m.Dynamo.EventBus.TLS.Cert)
	assert.Equal(t, c.Dynamo.EventBus.Brokers[0].TokenHash, m.Dynamo.EventBus.Brokers[0].TokenHash)

	assert.Equal(t, "change-me", c.Admin.Token, "the original is untouched")
	assert.Equal(t, "secret", c.Dynamo.Discovery.Etcd.Auth.Password)

	// With the secrets put back, nothing else differs.
	m.Admin.Token = c.Admin.Token
	m.Dynamo.Discovery.Etcd.Auth.Password = c.Dynamo.Discovery.Etcd.Auth.Password
	m.Dynamo.Discovery.Etcd.TLS.ClientKey = c.Dynamo.Discovery.Etcd.TLS.ClientKey
	m.Dynamo.EventBus.TLS.Key = c.Dynamo.EventBus.TLS.Key
	for i := range m.APIKeys {
		m.APIKeys[i].Key = c.APIKeys[i].Key
	}
	assert.Equal(t, c, m)
}

func TestMaskedLeavesUnsetSecretsEmpty(t *testing.T) {
	m := Default().Masked()
	assert.Empty(t, m.Admin.Token, "an unset secret reads as unset, not as ****")
	assert.Empty(t, m.Dynamo.EventBus.TLS.Key)
	assert.Nil(t, m.Dynamo.Discovery.Etcd.TLS)
	assert.Nil(t, m.Dynamo.Discovery.Etcd.Auth)
}

func TestCloneSharesNoMemory(t *testing.T) {
	c := loadFull(t)
	d := c.Clone()
	require.Equal(t, c, d)
	d.Backends[0].Models[0] = "changed"
	*d.Backends[0].Enabled = false
	d.Dynamo.Discovery.Etcd.Endpoints[0] = "changed"
	d.Dynamo.Discovery.Etcd.TLS.CACert = "changed"
	d.Dynamo.Discovery.Kubernetes.Models[0].Model = "changed"
	d.Dynamo.Shim.Pools[0].Backends[0] = "changed"
	d.Dynamo.Shim.ModelMap["qwen3-32b"] = "changed"
	*d.Dynamo.KV.ConditionalDisaggregation.DecodeBusyThreshold = 0
	d.Dynamo.EventBus.Brokers[0].Namespaces[0] = "changed"
	assert.Equal(t, loadFull(t), c)
}

func TestYAMLRoundTrip(t *testing.T) {
	for _, c := range []*Config{loadFull(t), Default()} {
		out, err := c.YAML()
		require.NoError(t, err)
		back, err := Parse(out, noEnv)
		require.NoError(t, err, string(out))
		assert.Equal(t, c, back)
	}
}

func TestYAMLOfMaskedConfigStillParses(t *testing.T) {
	out, err := loadFull(t).Masked().YAML()
	require.NoError(t, err)
	assert.NotContains(t, string(out), "change-me")
	assert.NotContains(t, string(out), "client-key.pem")
	back, err := Parse(out, noEnv)
	require.NoError(t, err)
	assert.Equal(t, Mask, back.Dynamo.Discovery.Etcd.Auth.Password)
}
