package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestServesNamespace(t *testing.T) {
	assert.True(t, validBase().ServesNamespace("dynamo"))
	assert.False(t, validBase().ServesNamespace("other"), "no pool for it")
	for name, mutate := range map[string]func(*Config){
		"dynamo off":            func(c *Config) { c.Dynamo.Enabled = false },
		"disaggregation off":    func(c *Config) { c.DisaggregatedServing.Enabled = false },
		"no shim":               func(c *Config) { c.Dynamo.Shim.Backends = nil },
		"shim backend off":      func(c *Config) { c.Backends[0].Enabled = ptr(false) },
		"shim names a stranger": func(c *Config) { c.Dynamo.Shim.Backends = []string{"nope"} },
	} {
		c := validBase()
		mutate(c)
		assert.False(t, c.ServesNamespace("dynamo"), name)
	}
	c := validBase()
	twoNamespaces(c)
	assert.True(t, c.ServesNamespace("prod"))
	assert.True(t, c.ServesNamespace("canary"))
	assert.Equal(t, []ShimPool{{Namespace: "dynamo", Backends: []string{"frontend"}}}, validBase().ShimPools())
}
