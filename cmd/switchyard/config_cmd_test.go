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
	assert.Contains(t, out, "warning: dynamo.kv.enabled: prompt rendering (tokenizers and chat templates from pinned artifacts) is not active yet")
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
