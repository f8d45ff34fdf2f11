package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestExpandEnv(t *testing.T) {
	env := envOf(map[string]string{"A": "alpha", "EMPTY": "", "TRICKY": "${A}"})
	cases := []struct{ in, want, err string }{
		{in: "plain", want: "plain"},
		{in: "${A}", want: "alpha"},
		{in: "x-${A}-y", want: "x-alpha-y"},
		{in: "${A}${A}", want: "alphaalpha"},
		{in: "${UNSET:-fallback}", want: "fallback"},
		{in: "${A:-fallback}", want: "alpha"},
		{in: "${EMPTY:-fallback}", want: "fallback"},
		{in: "${EMPTY}", want: ""},
		{in: "${UNSET:-}", want: ""},
		{in: "${UNSET:-a:b-c}", want: "a:b-c"},
		{in: "$A", want: "$A"},
		{in: "$", want: "$"},
		{in: "cost$5 and $$", want: "cost$5 and $$"},
		{in: "$$${A}", want: "$$alpha"},
		{in: "${TRICKY}", want: "${A}"},
		{in: "${UNSET}", err: "environment variable UNSET is not set"},
		{in: "${A", err: "unterminated ${"},
		{in: "${}", err: "invalid variable name"},
		{in: "${1A}", err: "invalid variable name"},
		{in: "${A B}", err: "invalid variable name"},
	}
	for _, tc := range cases {
		got, err := expandEnv(tc.in, env)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestParseExpandsEnvInValuesOnly(t *testing.T) {
	doc := untab(`
admin:
	token: "${TOKEN}"
dynamo:
	enabled: ${ON:-false}
	event_bus:
		max_sessions: ${SESSIONS:-8}
	discovery:
		etcd:
			endpoints: ["${ETCD_HOST}:2379"]
			watch_reconnect_backoff:
				initial: ${BACKOFF:-1s}
	shim:
		model_map:
			"${KEY}": "${VALUE:-v}"
`)
	c, err := Parse([]byte(doc), envOf(map[string]string{"TOKEN": "t0k", "ON": "true", "ETCD_HOST": "10.0.0.1"}))
	require.NoError(t, err)
	assert.Equal(t, "t0k", c.Admin.Token)
	assert.True(t, c.Dynamo.Enabled)
	assert.Equal(t, 8, c.Dynamo.EventBus.MaxSessions)
	assert.Equal(t, []string{"10.0.0.1:2379"}, c.Dynamo.Discovery.Etcd.Endpoints)
	assert.Equal(t, "1s", c.Dynamo.Discovery.Etcd.WatchReconnectBackoff.Initial.String())
	assert.Equal(t, map[string]string{"${KEY}": "v"}, c.Dynamo.Shim.ModelMap, "keys are not expanded")
}

func TestParseUnsetVariableNamesPathAndVariable(t *testing.T) {
	doc := "dynamo:\n  discovery:\n    etcd:\n      auth:\n        username: router\n        password: \"${ETCD_PASSWORD}\"\nadmin:\n  token: ${ADMIN_TOKEN}\n"
	_, err := Parse([]byte(doc), noEnv)
	require.Error(t, err)
	pe := err.(*ParseError)
	require.Len(t, pe.Errors, 2, "every unset variable is reported")
	assert.Equal(t, "dynamo.discovery.etcd.auth.password", pe.Errors[0].Path)
	assert.Contains(t, pe.Errors[0].Message, "ETCD_PASSWORD")
	assert.Equal(t, 6, pe.Errors[0].Line)
	assert.Equal(t, "admin.token", pe.Errors[1].Path)
	assert.Contains(t, pe.Errors[1].Message, "ADMIN_TOKEN")
}

func TestParseExpandedValueIsTypeChecked(t *testing.T) {
	_, err := Parse([]byte("dynamo:\n  enabled: ${ON}\n"), envOf(map[string]string{"ON": "sometimes"}))
	assert.ErrorContains(t, err, `dynamo.enabled (line 2): want true or false, got "sometimes"`)
}
