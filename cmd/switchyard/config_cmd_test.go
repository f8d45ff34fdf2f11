package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/config"
)

const testdata = "../../router/config/testdata/"

// run executes the root command in-process, with an empty stdin, and
// returns what it printed.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runWithStdin(t, "", args...)
}

// runWithStdin is run with stdin reading input.
func runWithStdin(t *testing.T, input string, args ...string) (string, error) {
	t.Helper()
	t.Setenv("ADMIN_TOKEN", "")
	t.Setenv("ETCD_PASSWORD", "")
	root := newRootCmd()
	var out bytes.Buffer
	root.SetIn(strings.NewReader(input))
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func requireExit1(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	var ee *exitError
	require.True(t, errors.As(err, &ee), "want *exitError, got %T: %v", err, err)
	assert.Equal(t, 1, ee.code)
	assert.Equal(t, 1, exitCode(err))
}

func TestConfigValidateOK(t *testing.T) {
	out, err := run(t, "config", "validate", testdata+"full.yaml")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		assert.True(t, strings.HasPrefix(l, "warning: "), l)
	}
	assert.Equal(t, fmt.Sprintf("config OK (%d warnings)", len(lines)-1), last)
	assert.NotContains(t, out, "dynamo.kv.enabled: prompt rendering")
}

func TestConfigValidateErrors(t *testing.T) {
	out, err := run(t, "config", "validate", testdata+"invalid_endpoint_credentials.yaml")
	requireExit1(t, err)
	assert.Contains(t, out, "error: dynamo.discovery.etcd.endpoints[0]: must not embed credentials")
	assert.NotContains(t, out, "hunter2")
	assert.NotContains(t, out, "config OK")
}

func TestConfigValidateParseFailure(t *testing.T) {
	out, err := run(t, "config", "validate", testdata+"invalid_unknown_field.yaml")
	requireExit1(t, err)
	assert.Contains(t, out, "error: dynamo.discovery.etcd.tls.foo (line 8): unknown field\n")
	assert.NotContains(t, out, "config OK")

	_, err = run(t, "config", "validate", testdata+"no-such-file.yaml")
	requireExit1(t, err)

	_, err = run(t, "config", "validate")
	require.Error(t, err, "FILE is required")
}

// Every invalid sample fails through the CLI too, naming its field.
func TestConfigValidateInvalidSamples(t *testing.T) {
	files, err := filepath.Glob(testdata + "invalid_*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			out, err := run(t, "config", "validate", f)
			requireExit1(t, err)
			assert.Contains(t, out, "error: "+expectedPath(t, f))
		})
	}
}

func TestConfigShowMasksAndFillsDefaults(t *testing.T) {
	out, err := run(t, "config", "show", testdata+"full.yaml")
	require.NoError(t, err)
	assert.NotContains(t, out, "change-me")
	assert.NotContains(t, out, "client-key.pem")
	assert.Contains(t, out, "ca_cert: /etc/etcd/ca.pem")
	back, err := config.Parse([]byte(out), nil)
	require.NoError(t, err, "show prints a loadable file")
	assert.Equal(t, config.Mask, back.Admin.Token)
	assert.Equal(t, config.Mask, back.Dynamo.Discovery.Etcd.Auth.Password)

	out, err = run(t, "config", "show", testdata+"minimal.yaml")
	require.NoError(t, err)
	for _, want := range []string{"max_staleness: 3s", "namespace: dynamo", "max_sessions: 64", "listen: 127.0.0.1:2379", "role: unified"} {
		assert.Contains(t, out, want)
	}
}

func TestConfigShowParseFailure(t *testing.T) {
	out, err := run(t, "config", "show", testdata+"invalid_list_unknown_field.yaml")
	requireExit1(t, err)
	assert.Contains(t, out, "error: backends[1].urll (line 6): unknown field")
}

func expectedPath(t *testing.T, file string) string {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	s := bufio.NewScanner(f)
	require.True(t, s.Scan())
	path, ok := strings.CutPrefix(s.Text(), "# expect: ")
	require.True(t, ok)
	return strings.TrimSpace(path)
}

// config validate recognises a fleet file and checks it with the fleet
// loader, not as a router file with ten unknown fields.
func TestConfigValidateFleetFile(t *testing.T) {
	out, err := run(t, "config", "validate", "../../deploy/config/fleet.yaml")
	require.NoError(t, err, out)
	assert.Equal(t, "fleet config OK (0 warnings)\n", out)

	bad := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("model: m\nfrontend: nowhere\nworkers: {prefill: -1, decode: 1}\ncard: {block_size: -16}\n"), 0o600))
	out, err = run(t, "config", "validate", bad)
	requireExit1(t, err)
	for _, want := range []string{
		"error: etcd.endpoints: at least one",
		"error: frontend: must be host:port",
		"error: workers.prefill: must be between 0 and 256, got -1",
		"error: card.block_size: must not be negative",
	} {
		assert.Contains(t, out, want)
	}

	require.NoError(t, os.WriteFile(bad, []byte("model: m\nworkers: {prefill: 200, decode: 9223372036854775807}\n"), 0o600))
	out, err = run(t, "config", "validate", bad)
	requireExit1(t, err)
	assert.Contains(t, out, "error: workers.decode: must be between 0 and 256")
	require.NoError(t, os.WriteFile(bad, []byte("model: m\nworkers: {prefill: 200, decode: 200}\n"), 0o600))
	out, err = run(t, "config", "validate", bad)
	requireExit1(t, err)
	assert.Contains(t, out, "error: workers: at most 256 workers in all, got 400")

	require.NoError(t, os.WriteFile(bad, []byte("model: m\ncard: {blocksize: 16}\n"), 0o600))
	out, err = run(t, "config", "validate", bad)
	requireExit1(t, err)
	assert.Contains(t, out, "error: card.blocksize (line 2): unknown field")

	// Kubernetes discovery needs no etcd, and a namespace that is a DNS label.
	require.NoError(t, os.WriteFile(bad, []byte("model: m\nfrontend: 127.0.0.1:1\nworkers: {aggregated: 1}\ndiscovery: {source: kubernetes, kubernetes: {namespace: dynamo}}\n"), 0o600))
	out, err = run(t, "config", "validate", bad)
	require.NoError(t, err, out)
	require.NoError(t, os.WriteFile(bad, []byte("model: m\nfrontend: 127.0.0.1:1\nworkers: {aggregated: 1}\ndiscovery: {source: kubernetes_pods, kubernetes: {namespace: Dynamo_NS}}\n"), 0o600))
	out, err = run(t, "config", "validate", bad)
	requireExit1(t, err)
	assert.Contains(t, out, `error: discovery.kubernetes.namespace: must be a Kubernetes namespace name (a DNS label), got "Dynamo_NS"`)
	assert.NotContains(t, out, "etcd.endpoints")
	require.NoError(t, os.WriteFile(bad, []byte("model: m\nfrontend: 127.0.0.1:1\nworkers: {aggregated: 1}\ndiscovery: {source: consul}\n"), 0o600))
	out, err = run(t, "config", "validate", bad)
	requireExit1(t, err)
	assert.Contains(t, out, `error: discovery.source: must be etcd, kubernetes or kubernetes_pods, got "consul"`)

	out, err = run(t, "config", "validate", "--kind", "router", "../../deploy/config/fleet.yaml")
	requireExit1(t, err)
	assert.Contains(t, out, "error: workers (line 8): unknown field")

	_, err = run(t, "config", "validate", "--kind", "scenario", "../../deploy/config/fleet.yaml")
	requireExit1(t, err)
	assert.ErrorContains(t, err, "--kind must be auto, router or fleet")
}

// A router file is never taken for a fleet file, even with a stray key
// the fleet file also has.
func TestConfigValidateAutoKind(t *testing.T) {
	assert.True(t, looksLikeFleetFile([]string{"etcd", "model"}))
	assert.False(t, looksLikeFleetFile([]string{"dynamo", "model"}))
	assert.False(t, looksLikeFleetFile(nil))
	assert.False(t, looksLikeFleetFile([]string{"nonsense"}))
	out, err := run(t, "config", "validate", testdata+"minimal.yaml")
	require.NoError(t, err, out)
	assert.Regexp(t, `(^|\n)config OK \(`, out)
}
