package discoverysource

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/internal/etcdtest"
	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource/etcdsource"
	"switchyard/router/events"
)

// recordingSink records every batch as it crossed into the core while
// folding it live, as the recorder will.
type recordingSink struct {
	mu       sync.Mutex
	follower *discovery.Follower
	batches  [][]events.Event
	snaps    []*discovery.Snapshot
}

func (r *recordingSink) Apply(b []events.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, b)
	r.follower.Apply(b)
	r.snaps = append(r.snaps, r.follower.Registry.Snapshot())
}

func (r *recordingSink) SetConnected(bool) {}

// The same events give the same fleet under the Real clock (live, against
// etcd) and under the Virtual clock (replayed in simulated time): every
// intermediate snapshot is identical, timestamps included, because the core
// reads time only from what crossed the boundary.
func TestRealAndVirtualClocksGiveIdenticalSnapshots(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	putWorker(t, cli, "dynamo", 1)

	live := &recordingSink{follower: discovery.NewFollower(discovery.NewReducer(nil, nil), discovery.NewRegistry())}
	w := etcdsource.New(etcdsource.Config{Endpoints: []string{etcd.Endpoint()}, Namespaces: []string{"dynamo"},
		BackoffInitial: 50 * time.Millisecond, BackoffMax: time.Second}, live, clock.Real{}, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	count := func() int {
		live.mu.Lock()
		defer live.mu.Unlock()
		return len(live.follower.Registry.Snapshot().Workers)
	}
	waitUntil(t, "seed", func() bool { return count() == 1 })
	putWorker(t, cli, "dynamo", 2)
	_, err := cli.Put(context.Background(), "v1/mdc/dynamo/decode/generate/2",
		`{"type":"Model","component":"decode","endpoint":"generate","instance_id":2,"card_json":{"display_name":"m","worker_type":"decode"}}`)
	require.NoError(t, err)
	_, err = cli.Delete(context.Background(), "v1/instances/dynamo/decode/generate/1")
	require.NoError(t, err)
	waitUntil(t, "changes", func() bool {
		live.mu.Lock()
		defer live.mu.Unlock()
		s := live.follower.Registry.Snapshot()
		return len(s.Workers) == 1 && s.Workers[0].Model == "m"
	})
	cancel()
	<-done

	// Replay in virtual time: the clock jumps to each batch's receipt time.
	live.mu.Lock()
	defer live.mu.Unlock()
	first := live.batches[0][0].Time()
	vc := clock.NewVirtual(first)
	replayed := discovery.NewFollower(discovery.NewReducer(nil, nil), discovery.NewRegistry())
	for i, b := range live.batches {
		vc.AdvanceTo(b[len(b)-1].Time())
		replayed.Apply(b)
		got, want := replayed.Registry.Snapshot(), live.snaps[i]
		require.Equal(t, want.Generation, got.Generation, "batch %d", i)
		require.Equal(t, want.PublishedAt, got.PublishedAt, "batch %d", i)
		require.Equal(t, len(want.Workers), len(got.Workers), "batch %d", i)
		for j := range want.Workers {
			require.Equal(t, *want.Workers[j], *got.Workers[j], "batch %d worker %d", i, j)
		}
	}
	require.False(t, vc.Now().Before(first), "virtual time only moves forward")
}
