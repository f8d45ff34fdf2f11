package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fixtures"
	"switchyard/internal/etcdtest"
	"switchyard/internal/syncbuf"
)

// The fleet command registers its workers in a real etcd and serves the
// frontend emulation; stopping it revokes the workers' leases.
func TestFleetCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	etcd := etcdtest.Start(t)
	bin := buildBinary(t)
	fe := freeAddr(t)
	cfg := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`etcd: {endpoints: [%q]}
frontend: %q
namespace: dynamo
model: m
workers: {prefill: 1, decode: 2}
speedup_ratio: 100
lease_ttl_seconds: 5
tokenizer: builtin:switchyard-bpe-4k
`, etcd.Endpoint(), fe)), 0o600))
	cmd := exec.Command(bin, "fleet", "--config", cfg)
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()

	cli := etcd.Client(t)
	count := func() int64 {
		r, err := cli.Get(context.Background(), "v1/instances/dynamo/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		require.NoError(t, err)
		return r.Count
	}
	waitFor(t, 20*time.Second, "three workers in etcd", func() bool { return count() == 3 })
	// The banner is printed after the last registration reaches etcd.
	waitFor(t, 10*time.Second, "the serving banner", func() bool { return strings.Contains(out.String(), "3 workers serving m") })
	// The checksums to pin, as a line of the router's dynamo.kv.
	pins := fmt.Sprintf("  pinned_artifacts: [%q, %q]\n", fixtureChecksum(t, fixtures.TokenizerJSON), fixtureChecksum(t, fixtures.TokenizerConfig))
	waitFor(t, 10*time.Second, "the checksums to pin", func() bool { return strings.Contains(out.String(), pins) })
	resp, err := http.Get("http://" + fe + "/fleet/workers")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	ch, err := cli.Get(context.Background(), "v1/event_channels/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	require.Equal(t, int64(6), ch.Count, "each engine worker advertises its kv_metrics and kv-events publishers")

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait())
	require.Zero(t, count(), "a clean stop revokes the leases at once")
	require.False(t, strings.Contains(out.String(), "panic"))
}
