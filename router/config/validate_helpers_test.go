package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// validBase is a small enabled configuration with no validation errors:
// one shim replica in front of an in-cluster etcd.
func validBase() *Config {
	c := Default()
	c.Admin.Token = "s3cret-admin-token-0123"
	c.Backends = []Backend{backend("frontend", "http://frontend:8000")}
	c.DisaggregatedServing.Enabled = true
	c.Dynamo.Enabled = true
	c.Dynamo.Discovery.Etcd.Endpoints = []string{"http://10.0.0.5:2379"}
	c.Dynamo.Load.DirectAllowCIDRs = []string{"10.0.0.0/8"}
	c.Dynamo.Shim.Backends = []string{"frontend"}
	return c
}

// backend is a defaulted backends[] entry, as Parse would build it.
func backend(name, url string) Backend {
	b := DefaultBackend()
	b.Name, b.URL = name, url
	return b
}

// podsBase switches validBase to the kubernetes_pods source.
func podsBase(c *Config) {
	c.Dynamo.Discovery.Source = SourceKubernetesPods
	c.Dynamo.Discovery.Kubernetes.Namespace = "dynamo"
	c.Dynamo.Discovery.Kubernetes.DynamoNamespace = "dyn-a"
	c.Dynamo.Discovery.Kubernetes.Model = "solar-pro4"
}

// twoNamespaces watches prod and canary with one pool each.
func twoNamespaces(c *Config) {
	c.Backends = append(c.Backends, backend("frontend-2", "http://frontend-2:8000"))
	c.Dynamo.Discovery.Etcd.Namespaces = []string{"prod", "canary"}
	c.Dynamo.Shim.Backends = nil
	c.Dynamo.Shim.Pools = []ShimPool{{Namespace: "prod", Backends: []string{"frontend"}}, {Namespace: "canary", Backends: []string{"frontend-2"}}}
}

// busOn enables a complete event-bus listener.
func busOn(c *Config) {
	b := &c.Dynamo.EventBus
	b.Enabled = true
	b.Listen = "0.0.0.0:7443"
	b.TLS = BusTLS{Cert: "/tls.crt", Key: "/tls.key"}
	b.Brokers = []BusClient{{ID: "broker-a.dynamo", Role: BusRoleBroker, TokenHash: hashA, Namespaces: []string{"dynamo"}}}
}

const (
	hashA = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	hashB = "sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"
	pin   = "blake3:62bc124be974d3a25db05bedc99422660c26715e5bbda0b37d14bd84a0c65ab2"
)

func dur(d time.Duration) Duration { return Duration(d) }

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strings.Replace(s, "#", strings.Repeat("x", i+1), 1)
	}
	return out
}

// Expectations of a rule case.
const (
	wantOK   = "ok"      // no errors at all, and no warning at path matching msg
	wantErr  = "error"   // an error at exactly path, message containing msg
	wantWarn = "warning" // a warning at exactly path, message containing msg
)

type ruleCase struct {
	name   string
	mutate func(c *Config)
	want   string
	path   string
	msg    string
}

func runRules(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validBase()
			if tc.mutate != nil {
				tc.mutate(c)
			}
			errs, warns := c.Validate()
			has := func(list []Issue) bool {
				return slices.ContainsFunc(list, func(i Issue) bool {
					return i.Path == tc.path && strings.Contains(i.Message, tc.msg)
				})
			}
			switch tc.want {
			case wantOK:
				assert.Empty(t, errs)
				if tc.path != "" {
					assert.False(t, has(warns), "unexpected warning at %s containing %q: %v", tc.path, tc.msg, warns)
				}
			case wantErr:
				assert.True(t, has(errs), "want an error at %s containing %q; errors: %v", tc.path, tc.msg, errs)
			case wantWarn:
				assert.Empty(t, errs)
				assert.True(t, has(warns), "want a warning at %s containing %q; warnings: %v", tc.path, tc.msg, warns)
			default:
				require.FailNow(t, "bad case", tc.want)
			}
		})
	}
}

func TestValidBaseIsClean(t *testing.T) {
	errs, warns := validBase().Validate()
	assert.Empty(t, errs)
	for _, w := range warns {
		assert.Contains(t, w.Message, "not active yet", "only inactive-feature warnings expected: %s", w)
	}
}

func TestIssueString(t *testing.T) {
	assert.Equal(t, "a.b[0]: bad", Issue{Path: "a.b[0]", Message: "bad"}.String())
}

// pins returns n distinct well-formed artifact pins.
func pins(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("blake3:%064x", i)
	}
	return out
}
