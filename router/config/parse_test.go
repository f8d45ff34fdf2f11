package config

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseEmptyDocumentsGiveDefaults(t *testing.T) {
	for name, doc := range map[string]string{
		"empty":        "",
		"comment only": "# nothing here\n",
		"null":         "~\n",
		"empty doc":    "---\n",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(doc), nil)
			require.NoError(t, err)
			assert.Equal(t, Default(), c)
		})
	}
}

func TestDefaults(t *testing.T) {
	c := parse(t, "")
	assert.Equal(t, "127.0.0.1:8080", c.Server.BindAddress)
	e := c.Dynamo.Discovery.Etcd
	assert.Equal(t, SourceEtcd, c.Dynamo.Discovery.Source)
	assert.Equal(t, "dynamo", e.Namespace)
	assert.Equal(t, 500*time.Millisecond, e.WatchReconnectBackoff.Initial.Std())
	assert.Equal(t, 30*time.Second, e.WatchReconnectBackoff.Max.Std())
	assert.Equal(t, c.Dynamo.Discovery.Etcd.WatchReconnectBackoff, c.Dynamo.Discovery.Kubernetes.WatchReconnectBackoff)
	assert.Equal(t, "127.0.0.1:2379", e.Embedded.Listen)
	assert.Empty(t, e.Embedded.DataDir)
	assert.Nil(t, e.TLS)
	assert.Nil(t, e.Auth)
	l := c.Dynamo.Load
	assert.Equal(t, 3*time.Second, l.MaxStaleness.Std())
	assert.Equal(t, TransportDirect, l.Transport)
	kv := c.Dynamo.KV
	assert.True(t, kv.AllowHTTPArtifacts)
	assert.False(t, kv.AllowHFArtifacts)
	assert.Empty(t, kv.PinnedArtifacts)
	assert.Empty(t, kv.ArtifactCacheDir, "empty: the per-user cache directory")
	assert.Equal(t, 1.0, kv.OverlapScoreCredit)
	assert.Equal(t, 1.0, kv.PrefillLoadScale)
	assert.Equal(t, 0.0, kv.RouterTemperature)
	assert.False(t, kv.SendTokenData)
	assert.False(t, kv.ConditionalDisaggregation.Enabled)
	assert.Nil(t, kv.ConditionalDisaggregation.DecodeBusyThreshold)
	b := c.Dynamo.EventBus
	assert.Equal(t, 64, b.MaxSessions)
	assert.Equal(t, 1024, b.MaxStreamsPerSession)
	assert.Equal(t, int64(67108864), b.MaxSessionBufferBytes)
	assert.Equal(t, 10*time.Second, b.HeartbeatInterval.Std())
	assert.Equal(t, 30*time.Second, b.IdleTimeout.Std())
}

func TestListElementDefaults(t *testing.T) {
	c := parse(t, `
backends:
	- {name: a, url: "http://a:1"}
	- {name: b, url: "http://b:1", type: openai, role: decode, enabled: false}
dynamo:
	event_bus:
		brokers:
			- {id: x}
			- {id: y, role: kv_listener}
`)
	assert.Equal(t, BackendTypeOpenAI, c.Backends[0].Type)
	assert.Equal(t, RoleUnified, c.Backends[0].Role)
	require.NotNil(t, c.Backends[0].Enabled)
	assert.True(t, c.Backends[0].IsEnabled())
	assert.Equal(t, RoleDecode, c.Backends[1].Role)
	assert.False(t, c.Backends[1].IsEnabled())
	assert.Equal(t, BusRoleBroker, c.Dynamo.EventBus.Brokers[0].Role)
	assert.Equal(t, BusRoleKVListener, c.Dynamo.EventBus.Brokers[1].Role)
}

func TestNullKeepsDefaultsAndClearsOptionalBlocks(t *testing.T) {
	c := parse(t, `
dynamo:
	discovery:
		etcd:
			namespace:
			tls: ~
			auth: {}
	load:
		max_staleness: null
`)
	assert.Equal(t, "dynamo", c.Dynamo.Discovery.Etcd.Namespace)
	assert.Nil(t, c.Dynamo.Discovery.Etcd.TLS, "tls: ~ is no tls block")
	assert.NotNil(t, c.Dynamo.Discovery.Etcd.Auth, "auth: {} is an (empty) auth block")
	assert.Equal(t, 3*time.Second, c.Dynamo.Load.MaxStaleness.Std())
}

func TestUnknownFieldsNameTheirFullPath(t *testing.T) {
	errs := parseErrors(t, `
server:
	bind_address: "127.0.0.1:1"
dynamo:
	discovery:
		etcd:
			tls:
				foo: 1
backends:
	- name: a
		url: "http://a:1"
	- name: b
		urll: "http://b:1"
dynamo_typo: true
`)
	assert.Equal(t, []string{
		"dynamo.discovery.etcd.tls.foo (line 8): unknown field",
		"backends[1].urll (line 13): unknown field",
		"dynamo_typo (line 14): unknown field",
	}, errs)
}

func TestUnknownFieldsInNestedLists(t *testing.T) {
	errs := parseErrors(t, `
dynamo:
	discovery:
		kubernetes:
			models:
				- {component: a, model: m}
				- {component: b, modle: m}
	shim:
		pools:
			- {namespace: a, backend: [x]}
	event_bus:
		brokers:
			- {id: a, token: t}
`)
	assert.Equal(t, []string{
		"dynamo.discovery.kubernetes.models[1].modle (line 7): unknown field",
		"dynamo.shim.pools[0].backend (line 10): unknown field",
		"dynamo.event_bus.brokers[0].token (line 13): unknown field",
	}, errs)
}

func TestTypeErrorsNameThePath(t *testing.T) {
	cases := []struct{ doc, want string }{
		{"dynamo:\n  enabled: yes\n", `dynamo.enabled (line 2): want true or false, got "yes"`},
		{"dynamo:\n  event_bus:\n    max_sessions: lots\n", "dynamo.event_bus.max_sessions (line 3): want an integer"},
		{"dynamo:\n  event_bus:\n    max_sessions: 1.5\n", "dynamo.event_bus.max_sessions (line 3): want an integer"},
		{"dynamo:\n  event_bus:\n    max_session_buffer_bytes: 99999999999999999999\n", "max_session_buffer_bytes (line 3): want an integer that fits in 64 bits"},
		{"dynamo:\n  load:\n    max_staleness: 3\n", `dynamo.load.max_staleness (line 3): want a duration such as "500ms"`},
		{"dynamo:\n  load:\n    max_staleness: [1s]\n", "dynamo.load.max_staleness (line 3): want a duration, got a list"},
		{"dynamo:\n  kv:\n    overlap_score_credit: high\n", "dynamo.kv.overlap_score_credit (line 3): want a finite number"},
		{"dynamo:\n  kv:\n    router_temperature: .nan\n", "dynamo.kv.router_temperature (line 3): want a finite number"},
		{"backends: {name: a}\n", "backends (line 1): want a list, got a mapping"},
		{"dynamo: [1]\n", "dynamo (line 1): want a mapping, got a list"},
		{"server:\n  bind_address: {host: a}\n", "server.bind_address (line 2): want a string, got a mapping"},
		{"dynamo:\n  shim:\n    model_map:\n      a: [b]\n", `dynamo.shim.model_map["a"] (line 4): want a string, got a list`},
		{"dynamo:\n  shim:\n    model_map: [a]\n", "dynamo.shim.model_map (line 3): want a mapping, got a list"},
		{"backends:\n  - enabled: maybe\n", `backends[0].enabled (line 2): want true or false, got "maybe"`},
	}
	for _, tc := range cases {
		errs := parseErrors(t, tc.doc)
		require.Len(t, errs, 1, tc.doc)
		assert.Contains(t, errs[0], tc.want)
	}
}

func TestTypedScalarsAcceptQuotedText(t *testing.T) {
	c := parse(t, `
dynamo:
	enabled: "true"
	event_bus:
		max_sessions: "32"
		max_streams_per_session: 0x10
	kv:
		overlap_score_credit: "0.5"
`)
	assert.True(t, c.Dynamo.Enabled)
	assert.Equal(t, 32, c.Dynamo.EventBus.MaxSessions)
	assert.Equal(t, 16, c.Dynamo.EventBus.MaxStreamsPerSession)
	assert.Equal(t, 0.5, c.Dynamo.KV.OverlapScoreCredit)
}

func TestDocumentShapeErrors(t *testing.T) {
	assert.Equal(t, []string{"line 1: the top level must be a mapping, got a list"}, parseErrors(t, "- a\n- b\n"))
	assert.Equal(t, []string{"line 1: the top level must be a mapping, got a scalar"}, parseErrors(t, "hello\n"))
	assert.Equal(t, []string{"line 2: only one YAML document is allowed"}, parseErrors(t, "server: {}\n---\nadmin: {}\n"))
	syntax := parseErrors(t, "server:\n  bind_address: [\n")
	require.Len(t, syntax, 1)
	assert.Contains(t, syntax[0], "yaml:")
	big := parseErrors(t, strings.Repeat("#", maxDocumentBytes+1))
	assert.Contains(t, big[0], "larger than")
}

func TestErrorFloodIsCapped(t *testing.T) {
	var b strings.Builder
	for i := range 250 {
		fmt.Fprintf(&b, "unknown_%d: 1\n", i)
	}
	errs := parseErrors(t, b.String())
	require.Len(t, errs, maxReportedErrors+1)
	assert.Equal(t, "... and 150 more problems", errs[maxReportedErrors])
}

func TestDuplicateKeys(t *testing.T) {
	errs := parseErrors(t, "dynamo:\n  enabled: true\n  enabled: false\n")
	assert.Equal(t, []string{"dynamo.enabled (line 3): duplicate key (first at line 2)"}, errs)
}

func TestAnchorsAndMergeKeysDecode(t *testing.T) {
	// There is no free-form top-level key to park an anchor on (it would
	// be an unknown field), so the first backend carries it.
	c := parse(t, `
backends:
	- &first
		name: a
		url: "http://a:1"
		models: [m]
	- <<: *first
		name: b
		role: decode
`)
	require.Len(t, c.Backends, 2)
	assert.Equal(t, "b", c.Backends[1].Name)
	assert.Equal(t, "http://a:1", c.Backends[1].URL, "merged")
	assert.Equal(t, []string{"m"}, c.Backends[1].Models, "merged")
	assert.Equal(t, RoleDecode, c.Backends[1].Role, "explicit key wins over merged")
}

func TestMergeKeyUnknownFieldsAreReported(t *testing.T) {
	errs := parseErrors(t, `
backends:
	- &first
		name: a
		url: "http://a:1"
		colour: red
	- <<: *first
		name: b
`)
	assert.Equal(t, []string{
		"backends[0].colour (line 6): unknown field",
		"backends[1].colour (line 6): unknown field",
	}, errs)
}

func TestSelfMergeIsRefusedNotLooped(t *testing.T) {
	errs := parseErrors(t, "server: &s\n  <<: *s\n")
	require.NotEmpty(t, errs)
	assert.Contains(t, errs[0], "merge key refers to its own mapping")
}

func TestAliasFanOutIsBounded(t *testing.T) {
	// Each level merges the previous one 16 times: 16^6 merge visits if
	// nothing stopped it. The visit budget turns that into an error.
	var b strings.Builder
	b.WriteString("backends:\n  - &b0 {name: a}\n")
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&b, "  - &b%d {<<: [", i)
		for j := range 16 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*b%d", i-1)
		}
		b.WriteString("]}\n")
	}
	start := time.Now()
	_, err := Parse([]byte(b.String()), nil)
	assert.ErrorContains(t, err, "too many nodes")
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestLoadReadsFileAndNamesIt(t *testing.T) {
	_, err := Load("testdata/does-not-exist.yaml")
	require.Error(t, err)
	_, err = Load("testdata/invalid_unknown_field.yaml")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "testdata/invalid_unknown_field.yaml: ")
}

func TestParseIntoDecodesAnyTaggedStruct(t *testing.T) {
	var v struct {
		Name  string   `yaml:"name"`
		Count int      `yaml:"count"`
		Tags  []string `yaml:"tags"`
		Inner struct {
			On bool `yaml:"on"`
		} `yaml:"inner"`
	}
	v.Count = 7 // a default the document leaves alone
	env := envOf(map[string]string{"N": "x"})
	require.NoError(t, ParseInto([]byte("name: ${N}\ntags: [a]\ninner: {on: true}\n"), &v, env))
	assert.Equal(t, "x", v.Name)
	assert.Equal(t, 7, v.Count)
	assert.Equal(t, []string{"a"}, v.Tags)
	assert.True(t, v.Inner.On)

	err := ParseInto([]byte("nme: a\ninner: {of: 1}\ncount: many\n"), &v, env)
	var pe *ParseError
	require.ErrorAs(t, err, &pe)
	var paths []string
	for _, fe := range pe.Errors {
		paths = append(paths, fe.Path)
	}
	assert.Equal(t, []string{"nme", "inner.of", "count"}, paths)
}

func TestIsEmpty(t *testing.T) {
	for _, doc := range []string{"", "  \n\t\n", "# only a comment\n\n# another\n", "~\n", "---\n", "null"} {
		assert.True(t, IsEmpty([]byte(doc)), "%q", doc)
	}
	for _, doc := range []string{"a: 1\n", "dynamo:\n", "[1]", "a: [\n"} {
		assert.False(t, IsEmpty([]byte(doc)), "%q", doc)
	}
}

func TestTopLevelKeys(t *testing.T) {
	keys, err := TopLevelKeys([]byte("model: m\n# c\netcd: {endpoints: []}\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"model", "etcd"}, keys)
	keys, err = TopLevelKeys(nil)
	require.NoError(t, err)
	assert.Empty(t, keys)
	_, err = TopLevelKeys([]byte("- a\n"))
	assert.Error(t, err)
	assert.Contains(t, TopLevelFields(), "dynamo")
	assert.Len(t, TopLevelFields(), 8)
}

func TestBackendPromptRewritesParse(t *testing.T) {
	c := parse(t, `
backends:
	- name: a
		url: "http://a:1"
		global_prompts: ["Be brief.", "Answer in French."]
		requires_single_leading_system: true
	- name: b
		url: "http://b:1"
`)
	assert.Equal(t, []string{"Be brief.", "Answer in French."}, c.Backends[0].GlobalPrompts)
	assert.True(t, c.Backends[0].RequiresSingleLeadingSystem)
	assert.Empty(t, c.Backends[1].GlobalPrompts)
	assert.False(t, c.Backends[1].RequiresSingleLeadingSystem)
}
