package main

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"switchyard/router/bus/kvlistener"
	"switchyard/router/bus/wire"
	"switchyard/router/config"
)

// kvListenerArgs parses args as the kv-listener command's flags.
func kvListenerArgs(t *testing.T, args ...string) *kvListenerFlags {
	t.Helper()
	f := &kvListenerFlags{}
	fs := pflag.NewFlagSet("kv-listener", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.bind(fs)
	require.NoError(t, fs.Parse(args))
	return f
}

// required are the flags every run needs.
var kvRequired = []string{"--bus-url", "https://router.example:7443", "--client-id", "kv-listener-a"}

func kvArgs(extra ...string) []string { return append(append([]string{}, kvRequired...), extra...) }

// The defaults the documentation's table promises.
func TestKVListenerFlagDefaults(t *testing.T) {
	cmd := newKVListenerCmd()
	for flag, want := range map[string]string{
		"ring-events":    "4096",
		"ring-bytes":     "8388608",
		"max-streams":    "1024",
		"metrics-listen": ":9467",
		"token-env":      "SWITCHYARD_BUS_TOKEN",
		"token-file":     "",
		"discovery":      "",
		"kube-namespace": "",
		"etcd-endpoints": "[]",
	} {
		fl := cmd.Flags().Lookup(flag)
		require.NotNil(t, fl, "--%s", flag)
		require.Equal(t, want, fl.DefValue, "--%s", flag)
	}
	require.NotNil(t, cmd.Flags().Lookup("log-level"))

	set, err := kvListenerArgs(t, kvArgs("--backend", "vllm-1=dynamo")...).check(envOf(nil))
	require.NoError(t, err)
	require.Equal(t, []kvlistener.Backend{{Name: "vllm-1", Namespace: "dynamo"}}, set.backends)
	d := set.discovery.Dynamo.Discovery
	require.Equal(t, config.SourceEtcd, d.Source)
	require.Equal(t, []string{DefaultBrokerEtcd}, d.Etcd.Endpoints)
	require.Equal(t, "dynamo", d.Etcd.Namespace, "one namespace: the etcd namespace itself")
	require.Nil(t, set.allow, "no --direct-allow-cidrs: any address")
}

// Backends keep their order; their namespaces are discovered, each once.
func TestKVListenerBackendsAndDiscovery(t *testing.T) {
	f := kvListenerArgs(t, kvArgs("--backend", "vllm-1=dynamo", "--backend", "sglang=other", "--backend", "vllm-2=dynamo",
		"--direct-allow-cidrs", "10.0.0.0/8,192.168.1.0/24")...)
	set, err := f.check(envOf(map[string]string{"ETCD_ENDPOINTS": "etcd-0:2379, etcd-1:2379 ,"}))
	require.NoError(t, err)
	require.Equal(t, []kvlistener.Backend{{Name: "vllm-1", Namespace: "dynamo"}, {Name: "sglang", Namespace: "other"}, {Name: "vllm-2", Namespace: "dynamo"}}, set.backends)
	d := set.discovery.Dynamo.Discovery
	require.Equal(t, config.SourceEtcd, d.Source)
	require.Equal(t, []string{"dynamo", "other"}, d.Etcd.Namespaces)
	require.Equal(t, []string{"etcd-0:2379", "etcd-1:2379"}, d.Etcd.Endpoints, "ETCD_ENDPOINTS, trimmed, when no flag is given")
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.0/24")}, set.allow)

	// The flag wins over the variable.
	set, err = kvListenerArgs(t, kvArgs("--backend", "b=dynamo", "--etcd-endpoints", "e:2379")...).
		check(envOf(map[string]string{"ETCD_ENDPOINTS": "ignored:1"}))
	require.NoError(t, err)
	require.Equal(t, []string{"e:2379"}, set.discovery.Dynamo.Discovery.Etcd.Endpoints)

	// DYN_DISCOVERY_BACKEND=kubernetes picks the API server, in
	// POD_NAMESPACE unless --kube-namespace names one.
	kube := envOf(map[string]string{"DYN_DISCOVERY_BACKEND": "kubernetes", "POD_NAMESPACE": "gpu"})
	set, err = kvListenerArgs(t, kvArgs("--backend", "vllm-1=dynamo", "--backend", "sglang=other")...).check(kube)
	require.NoError(t, err)
	d = set.discovery.Dynamo.Discovery
	require.Equal(t, config.SourceKubernetes, d.Source)
	require.Equal(t, "gpu", d.Kubernetes.Namespace)
	require.Equal(t, []string{"dynamo", "other"}, d.Kubernetes.DynamoNamespaces)
	set, err = kvListenerArgs(t, kvArgs("--backend", "b=dynamo", "--kube-namespace", "inference")...).check(kube)
	require.NoError(t, err)
	require.Equal(t, "inference", set.discovery.Dynamo.Discovery.Kubernetes.Namespace)
	set, err = kvListenerArgs(t, kvArgs("--backend", "b=dynamo", "--discovery", "kubernetes")...).check(envOf(nil))
	require.NoError(t, err)
	require.Equal(t, "default", set.discovery.Dynamo.Discovery.Kubernetes.Namespace)
	// --discovery wins over the variable.
	set, err = kvListenerArgs(t, kvArgs("--backend", "b=dynamo", "--discovery", "etcd")...).check(kube)
	require.NoError(t, err)
	require.Equal(t, config.SourceEtcd, set.discovery.Dynamo.Discovery.Source)
}

func TestKVListenerBackendRefusals(t *testing.T) {
	long := strings.Repeat("n", wire.MaxNameBytes)
	_, _, err := parseBackends([]string{long + "=" + long})
	require.NoError(t, err, "names of %d bytes", wire.MaxNameBytes)
	many := make([]string, wire.MaxSources)
	for i := range many {
		many[i] = "b" + strconv.Itoa(i) + "=dynamo"
	}
	_, _, err = parseBackends(many)
	require.NoError(t, err, "%d backends", wire.MaxSources)

	for name, tc := range map[string]struct {
		pairs []string
		want  string
	}{
		"none":                 {nil, "--backend NAME=NAMESPACE is required"},
		"no namespace":         {[]string{"vllm-1"}, "want NAME=NAMESPACE"},
		"empty name":           {[]string{"=dynamo"}, "want NAME=NAMESPACE"},
		"empty namespace":      {[]string{"vllm-1="}, "want NAME=NAMESPACE"},
		"two equals":           {[]string{"vllm-1=dynamo=x"}, "want NAME=NAMESPACE"},
		"space in the name":    {[]string{"vllm 1=dynamo"}, "the name holds a space or control character"},
		"tab in the namespace": {[]string{"vllm-1=dyn\tamo"}, "the namespace holds a space or control character"},
		"name too long":        {[]string{long + "x=dynamo"}, fmt.Sprintf("the name is longer than %d bytes", wire.MaxNameBytes)},
		"namespace too long":   {[]string{"vllm-1=" + long + "x"}, fmt.Sprintf("the namespace is longer than %d bytes", wire.MaxNameBytes)},
		"given twice":          {[]string{"vllm-1=dynamo", "vllm-1=other"}, `backend "vllm-1" is given twice`},
		"too many":             {append(many, "one-more=dynamo"), fmt.Sprintf("at most %d backends", wire.MaxSources)},
	} {
		_, _, err := parseBackends(tc.pairs)
		require.ErrorContains(t, err, tc.want, name)
		require.ErrorContains(t, err, "--backend", name)
	}
}

// The ring bounds of the documentation, checked at the flags.
func TestKVListenerRingBounds(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" when accepted
	}{
		{[]string{"--ring-events", "1"}, ""},
		{[]string{"--ring-events", "1048576"}, ""},
		{[]string{"--ring-events", "0"}, "--ring-events must be 1-1048576, got 0"},
		{[]string{"--ring-events", "-5"}, "--ring-events must be 1-1048576, got -5"},
		{[]string{"--ring-events", "1048577"}, "--ring-events must be 1-1048576, got 1048577"},
		{[]string{"--ring-bytes", strconv.Itoa(kvlistener.MinRingBytes)}, ""},
		{[]string{"--ring-bytes", strconv.Itoa(kvlistener.MinRingBytes - 1)}, fmt.Sprintf("--ring-bytes must be at least %d", kvlistener.MinRingBytes)},
		{[]string{"--ring-bytes", "0"}, fmt.Sprintf("--ring-bytes must be at least %d", kvlistener.MinRingBytes)},
		{[]string{"--max-streams", "65536"}, ""},
		{[]string{"--max-streams", "0"}, "--max-streams must be 1-65536, got 0"},
		{[]string{"--max-streams", "65537"}, "--max-streams must be 1-65536, got 65537"},
	} {
		_, err := kvListenerArgs(t, kvArgs(append([]string{"--backend", "b=dynamo"}, tc.args...)...)...).check(envOf(nil))
		if tc.want == "" {
			require.NoError(t, err, "%v", tc.args)
		} else {
			require.ErrorContains(t, err, tc.want, "%v", tc.args)
		}
	}
	// The accepted minimum makes a listener.
	f := kvListenerArgs(t, kvArgs("--backend", "b=dynamo", "--ring-events", "1", "--ring-bytes", strconv.Itoa(kvlistener.MinRingBytes))...)
	set, err := f.check(envOf(nil))
	require.NoError(t, err)
	_, err = kvlistener.New(kvlistener.Config{Backends: set.backends, RingEvents: f.ringEvents, RingBytes: f.ringBytes})
	require.NoError(t, err)
}

// --token-file is re-read at every call (a rotated Secret); without it
// the --token-env variable is read.
func TestKVListenerToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte("first\n"), 0o600))
	tok := kvListenerArgs(t, kvArgs("--backend", "b=dynamo", "--token-file", path)...).token()
	got, err := tok()
	require.NoError(t, err)
	require.Equal(t, "first", got)
	require.NoError(t, os.WriteFile(path, []byte("  rotated \n"), 0o600))
	got, err = tok()
	require.NoError(t, err)
	require.Equal(t, "rotated", got)
	require.NoError(t, os.Remove(path))
	_, err = tok()
	require.Error(t, err, "a missing token file is an error, not an empty token")

	t.Setenv(DefaultBrokerTokenEnv, "default-var")
	t.Setenv("SWITCHYARD_TEST_KVL_TOKEN", "named-var")
	got, err = kvListenerArgs(t, kvArgs("--backend", "b=dynamo")...).token()()
	require.NoError(t, err)
	require.Equal(t, "default-var", got)
	got, err = kvListenerArgs(t, kvArgs("--backend", "b=dynamo", "--token-env", "SWITCHYARD_TEST_KVL_TOKEN")...).token()()
	require.NoError(t, err)
	require.Equal(t, "named-var", got)
}

// Bad flags end the command with an error naming what is wrong, before
// anything listens or dials.
func TestKVListenerCommandRefusesBadFlags(t *testing.T) {
	const url = "https://127.0.0.1:7443"
	base := func(extra ...string) []string {
		return append([]string{"kv-listener", "--bus-url", url, "--client-id", "kvl", "--metrics-listen", "", "--backend", "b=dynamo"}, extra...)
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no bus url":        {[]string{"kv-listener", "--client-id", "kvl", "--backend", "b=dynamo"}, "--bus-url and --client-id are required"},
		"no client id":      {[]string{"kv-listener", "--bus-url", url, "--backend", "b=dynamo"}, "--bus-url and --client-id are required"},
		"no backend":        {[]string{"kv-listener", "--bus-url", url, "--client-id", "kvl"}, "--backend NAME=NAMESPACE is required"},
		"bad backend":       {base("--backend", "vllm"), `--backend "vllm": want NAME=NAMESPACE`},
		"duplicate backend": {base("--backend", "b=other"), `backend "b" is given twice`},
		"ring events 0":     {base("--ring-events", "0"), "--ring-events must be 1-1048576"},
		"ring bytes small":  {base("--ring-bytes", "1024"), "--ring-bytes must be at least"},
		"max streams 0":     {base("--max-streams", "0"), "--max-streams must be 1-65536"},
		"bad discovery":     {base("--discovery", "consul"), `--discovery must be etcd or kubernetes, not "consul"`},
		"bad cidr":          {base("--direct-allow-cidrs", "10.0.0.0/33"), "--direct-allow-cidrs"},
		"plain http":        {[]string{"kv-listener", "--bus-url", "http://127.0.0.1:7443", "--client-id", "kvl", "--metrics-listen", "", "--backend", "b=dynamo"}, "https://host:port"},
		"cert without key":  {base("--cert-file", "x.crt"), "--cert-file and --key-file go together"},
		"unreadable ca":     {base("--ca-file", filepath.Join(t.TempDir(), "missing.crt")), "--ca-file"},
		"not a number":      {base("--ring-events", "many"), "ring-events"},
		"an argument":       {base("extra"), "unknown command"},
	} {
		cmd := newRootCmd()
		cmd.SetArgs(tc.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		require.ErrorContains(t, cmd.Execute(), tc.want, name)
	}
}
