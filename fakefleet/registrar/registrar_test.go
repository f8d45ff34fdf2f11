package registrar

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/internal/etcdtest"
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

	r, err := Register(ctx, cli, worker(), 2)
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

	r2, err := Register(ctx, cli, worker(), 10)
	require.NoError(t, err)
	require.Equal(t, 2, keysUnder(t, cli, "v1/"))
	require.NoError(t, r2.Deregister(ctx))
	require.Equal(t, 0, keysUnder(t, cli, "v1/"), "revoking removes the keys at once")
}
