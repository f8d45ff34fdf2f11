package registrar

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/internal/etcdtest"
	"switchyard/internal/syncbuf"
)

func worker() Worker {
	return Worker{Namespace: "dynamo", Component: "decode", WorkerType: "decode", Model: "m", BlockSize: 16,
		TotalKVBlocks: 100, MaxNumBatchedTokens: 2048, MaxNumSeqs: 8, ContextLength: 4096, Transport: "127.0.0.1:1/x"}
}

func keysUnder(t *testing.T, cli *clientv3.Client, prefix string) int {
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	return int(resp.Count)
}

func TestRegisterKillAndDeregister(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	ctx := context.Background()

	r, err := Register(ctx, cli, worker(), 2, nil)
	require.NoError(t, err)
	hex := strconv.FormatUint(r.InstanceID(), 16)
	resp, err := cli.Get(ctx, "v1/mdc/dynamo/decode/generate/"+hex)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	require.Equal(t, int64(r.InstanceID()), resp.Kvs[0].Lease, "records live under the worker's lease")
	var model struct {
		InstanceID uint64 `json:"instance_id"`
		Card       struct {
			WorkerType string `json:"worker_type"`
		} `json:"card_json"`
	}
	require.NoError(t, json.Unmarshal(resp.Kvs[0].Value, &model))
	require.Equal(t, r.InstanceID(), model.InstanceID, "instance id = lease id")
	require.Equal(t, "decode", model.Card.WorkerType)

	// Kept alive past its TTL while running...
	time.Sleep(3 * time.Second)
	require.Equal(t, 2, keysUnder(t, cli, "v1/"))
	// ...gone within the TTL (plus etcd's lease checkpoint slack) once killed.
	r.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for keysUnder(t, cli, "v1/") != 0 {
		require.True(t, time.Now().Before(deadline), "keys outlived the lapsed lease")
		time.Sleep(50 * time.Millisecond)
	}

	r2, err := Register(ctx, cli, worker(), 10, nil)
	require.NoError(t, err)
	require.Equal(t, 2, keysUnder(t, cli, "v1/"))
	require.NoError(t, r2.Deregister(ctx))
	require.Equal(t, 0, keysUnder(t, cli, "v1/"), "revoking removes the keys at once")
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		time.Sleep(20 * time.Millisecond)
	}
}

// liveUnder reports whether every record of the worker is in etcd under
// a live lease with the worker's id.
func liveUnder(t *testing.T, cli *clientv3.Client, r *Registration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "v1/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 2 {
		return false
	}
	for _, kv := range resp.Kvs {
		if kv.Lease != int64(r.InstanceID()) {
			return false
		}
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(r.InstanceID()))
	return err == nil && ttl.TTL > 0
}

// A lease revoked behind the worker's back ends its keep-alive and removes
// its records: the worker grants its lease again under its own id, puts
// its records back, and says so.
func TestRevokedLeaseReregisters(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	logs := &syncbuf.Buffer{}
	r, err := Register(context.Background(), cli, worker(), 2, slog.New(slog.NewTextHandler(logs, nil)))
	require.NoError(t, err)
	defer r.Kill()

	_, err = srv.Client(t).Revoke(context.Background(), clientv3.LeaseID(r.InstanceID()))
	require.NoError(t, err)
	waitUntil(t, "the re-registration log", func() bool { return strings.Contains(logs.String(), "fake worker re-registered") })
	require.Contains(t, logs.String(), "lease keep-alive ended")
	require.Contains(t, logs.String(), "lease=new")
	waitUntil(t, "the records back under a live lease", func() bool { return liveUnder(t, cli, r) })

	// Still kept alive past its TTL, and still gone once killed.
	time.Sleep(3 * time.Second)
	require.True(t, liveUnder(t, cli, r))
	r.Kill()
	waitUntil(t, "the killed worker's keys to lapse", func() bool { return keysUnder(t, cli, "v1/") == 0 })
}

// An etcd outage longer than the TTL ends the keep-alive on the client
// side; once etcd is back the worker is live again with its records.
func TestEtcdOutageReregisters(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	logs := &syncbuf.Buffer{}
	r, err := Register(context.Background(), cli, worker(), 1, slog.New(slog.NewTextHandler(logs, nil)))
	require.NoError(t, err)
	defer r.Kill()

	srv.Stop()
	waitUntil(t, "the keep-alive to end", func() bool { return strings.Contains(logs.String(), "lease keep-alive ended") })
	srv.Restart(t)
	waitUntil(t, "the re-registration log", func() bool { return strings.Contains(logs.String(), "fake worker re-registered") })
	waitUntil(t, "the records under a live lease", func() bool { return liveUnder(t, cli, r) })
	time.Sleep(2 * time.Second) // past the TTL: the lease is kept alive, not lapsing
	require.True(t, liveUnder(t, cli, r))
}
