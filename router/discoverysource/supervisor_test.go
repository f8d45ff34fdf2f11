package discoverysource

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/internal/etcdtest"
	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/core"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource/etcdsource"
	"switchyard/router/events"
	"switchyard/router/metrics"
	"switchyard/router/picker"
)

func testConfig(endpoint string, namespaces ...string) *config.Config {
	c := config.Default()
	c.Dynamo.Enabled = true
	c.Dynamo.Discovery.Etcd.Endpoints = []string{endpoint}
	if len(namespaces) == 1 {
		c.Dynamo.Discovery.Etcd.Namespace = namespaces[0]
	} else {
		c.Dynamo.Discovery.Etcd.Namespaces = namespaces
	}
	c.Dynamo.Discovery.Etcd.WatchReconnectBackoff = config.Backoff{
		Initial: config.Duration(50 * time.Millisecond), Max: config.Duration(500 * time.Millisecond)}
	return c
}

func putWorker(t *testing.T, cli *clientv3.Client, ns string, id int) {
	t.Helper()
	key := fmt.Sprintf("v1/instances/%s/decode/generate/%x", ns, id)
	val := fmt.Sprintf(`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":%d}`, id)
	_, err := cli.Put(context.Background(), key, val)
	require.NoError(t, err)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func namespacesOf(s *discovery.Snapshot) map[string]int {
	out := map[string]int{}
	for _, w := range s.Workers {
		out[w.Namespace]++
	}
	return out
}

// newTarget is a routing core behind its lock, recording to port (nil
// records nothing).
func newTarget(t testing.TB, port core.Port) *core.Shared {
	c, err := core.New(core.Options{Picker: picker.NameLoad, Port: port})
	require.NoError(t, err)
	return core.NewShared(c, clock.Real{})
}

func newSupervisor(t *testing.T) (*Supervisor, *discovery.Registry) {
	return newSupervisorPort(t, nil)
}

func newSupervisorPort(t *testing.T, port core.Port) (*Supervisor, *discovery.Registry) {
	m := metrics.New()
	target := newTarget(t, port)
	s := New(target, clock.Real{}, slog.New(slog.DiscardHandler), &m.Discovery, nil)
	t.Cleanup(s.Stop)
	return s, target.Registry()
}

func TestReloadClassesAgainstEtcd(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	putWorker(t, cli, "prod", 1)
	putWorker(t, cli, "canary", 2)

	s, reg := newSupervisor(t)
	cfg := testConfig(etcd.Endpoint(), "prod", "canary")
	s.Apply(cfg)
	waitUntil(t, "both namespaces", func() bool { return len(reg.Snapshot().Workers) == 2 && s.Connected() })
	prodWorker, _ := reg.Snapshot().Worker(discovery.WorkerKey{Namespace: "prod", InstanceID: 1})

	// Backoff only: the snapshot stays readable and nothing changes.
	gen := reg.Generation()
	c2 := cfg.Clone()
	c2.Dynamo.Discovery.Etcd.WatchReconnectBackoff.Max = config.Duration(time.Second)
	s.Apply(c2)
	require.Len(t, reg.Snapshot().Workers, 2, "backoff-only reload keeps the snapshot")
	waitUntil(t, "the replacement watcher", s.Connected)
	require.Equal(t, gen, reg.Generation(), "an unchanged resync does not move the generation")
	require.Equal(t, uint64(1), s.Restarts())

	// Removing a namespace prunes only its workers; kept ones are untouched.
	c3 := c2.Clone()
	c3.Dynamo.Discovery.Etcd.Namespaces = []string{"prod"}
	s.Apply(c3)
	require.Equal(t, map[string]int{"prod": 1}, namespacesOf(reg.Snapshot()), "pruned at once, before the new watcher resyncs")
	kept, _ := reg.Snapshot().Worker(discovery.WorkerKey{Namespace: "prod", InstanceID: 1})
	require.Equal(t, prodWorker.FirstSeen, kept.FirstSeen)
	waitUntil(t, "the replacement watcher", s.Connected)
	putWorker(t, cli, "canary", 3)
	putWorker(t, cli, "prod", 4)
	waitUntil(t, "prod worker 4", func() bool { return len(reg.Snapshot().Workers) == 2 })
	require.Equal(t, map[string]int{"prod": 2}, namespacesOf(reg.Snapshot()), "the removed namespace is no longer watched")
	require.Equal(t, []string{"prod"}, s.Namespaces())

	// A connection change resets the registry and rebuilds it.
	c4 := c3.Clone()
	// The same server under another name: new connection settings.
	c4.Dynamo.Discovery.Etcd.Endpoints = []string{"http://localhost:" + portOf(etcd.Endpoint())}
	s.Apply(c4)
	waitUntil(t, "rebuilt fleet", func() bool { return len(reg.Snapshot().Workers) == 2 && s.Connected() })
	rebuilt, _ := reg.Snapshot().Worker(discovery.WorkerKey{Namespace: "prod", InstanceID: 1})
	require.NotSame(t, kept, rebuilt, "a connection change starts a new reducer")
	require.Equal(t, uint64(3), s.Restarts())

	// Disabling stops discovery and empties the registry, without a restart.
	c5 := c4.Clone()
	c5.Dynamo.Enabled = false
	s.Apply(c5)
	require.Empty(t, reg.Snapshot().Workers)
	require.False(t, s.Enabled())
	require.False(t, s.Connected())
	require.Equal(t, uint64(3), s.Restarts())
}

func portOf(endpoint string) string {
	for i := len(endpoint) - 1; i >= 0; i-- {
		if endpoint[i] == ':' {
			return endpoint[i+1:]
		}
	}
	return ""
}

// lateRunner keeps sending after it has been replaced, like a watcher that
// ignores cancellation for a while.
type lateRunner struct {
	sink    etcdsource.Sink
	ns      string
	started chan struct{}
	release chan struct{}
}

func (r *lateRunner) Run(ctx context.Context) error {
	r.sink.Apply([]events.Event{events.DiscoveryPut{Namespace: r.ns, DiscoveryRecord: events.DiscoveryRecord{Keyspace: events.Instances,
		Key: "v1/instances/" + r.ns + "/decode/generate/1", Value: []byte(`{"type":"Endpoint","endpoint":"generate","instance_id":1}`)}}})
	r.sink.SetConnected(true)
	close(r.started)
	<-ctx.Done()
	<-r.release
	r.sink.Apply([]events.Event{events.DiscoveryPut{Namespace: r.ns, DiscoveryRecord: events.DiscoveryRecord{Keyspace: events.Instances,
		Key: "v1/instances/" + r.ns + "/decode/generate/2", Value: []byte(`{"type":"Endpoint","endpoint":"generate","instance_id":2}`)}}})
	r.sink.SetConnected(true)
	return nil
}

// A replaced watcher that keeps delivering cannot touch the new fleet.
func TestReplacedWatcherBatchesAreIgnored(t *testing.T) {
	var mu sync.Mutex
	var runners []*lateRunner
	m := metrics.New()
	target := newTarget(t, nil)
	s := New(target, clock.Real{}, slog.New(slog.DiscardHandler), &m.Discovery,
		func(cfg *config.Config, sink etcdsource.Sink, _ func(string)) Runner {
			mu.Lock()
			defer mu.Unlock()
			r := &lateRunner{sink: sink, ns: cfg.Dynamo.Discovery.Etcd.Namespace, started: make(chan struct{}), release: make(chan struct{})}
			runners = append(runners, r)
			return r
		})
	s.Apply(testConfig("http://127.0.0.1:1", "a"))
	<-runners[0].started
	close(runners[0].release) // it will deliver once more after cancellation
	s.Apply(testConfig("http://127.0.0.1:1", "b"))
	<-runners[1].started
	snap := target.Snapshot()
	require.Equal(t, map[string]int{"b": 1}, namespacesOf(snap), "the old watcher's late batch was dropped")
	close(runners[1].release)
	s.Stop()
	require.False(t, s.Connected())
}

// tap is a core port that keeps the discovery inputs and publishes it is
// handed.
type tap struct {
	mu      sync.Mutex
	entries []events.Event
}

func (tp *tap) Record(out core.Output) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	switch out.(type) {
	case events.DiscoveryPut, events.DiscoveryDelete, events.DiscoveryResync, events.DiscoveryPrune, events.DiscoveryReset, core.Published:
		tp.entries = append(tp.entries, out)
	}
}

// Through starts, a prune, a replacement and a stop against a real etcd,
// the core's port sees every discovery event and every publish in the
// order applied: a fresh core fed what it saw (a replay) reaches the same
// generation at every publish, and the same fleet, first-seen times
// included.
func TestRecordingReplaysIntoTheSameRegistry(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client(t)
	putWorker(t, cli, "prod", 1)
	putWorker(t, cli, "canary", 2)

	tp := &tap{}
	s, reg := newSupervisorPort(t, tp)
	cfg := testConfig(etcd.Endpoint(), "prod", "canary")
	s.Apply(cfg)
	waitUntil(t, "both namespaces", func() bool { return len(reg.Snapshot().Workers) == 2 && s.Connected() })
	putWorker(t, cli, "prod", 3)
	waitUntil(t, "worker 3", func() bool { return len(reg.Snapshot().Workers) == 3 })
	c2 := cfg.Clone()
	c2.Dynamo.Discovery.Etcd.Namespaces = []string{"prod"}
	s.Apply(c2) // prune
	waitUntil(t, "the replacement watcher", s.Connected)
	c3 := c2.Clone()
	c3.Dynamo.Discovery.Etcd.Endpoints = []string{"http://localhost:" + portOf(etcd.Endpoint())}
	s.Apply(c3) // replace: a new reducer
	waitUntil(t, "rebuilt fleet", func() bool { return len(reg.Snapshot().Workers) == 2 && s.Connected() })
	_, err := cli.Delete(context.Background(), "v1/instances/prod/decode/generate/3")
	require.NoError(t, err)
	waitUntil(t, "worker 3 to leave", func() bool { return len(reg.Snapshot().Workers) == 1 })
	live := reg.Snapshot()
	s.Stop()

	tp.mu.Lock()
	defer tp.mu.Unlock()
	rc, err := core.New(core.Options{Picker: picker.NameLoad})
	require.NoError(t, err)
	replayed := rc.Registry()
	var resets, publishes int
	for _, e := range tp.entries {
		require.Equal(t, e.Time(), e.Time().Round(0), "times carry no monotonic reading")
		switch v := e.(type) {
		case core.Published:
			publishes++
			require.Equal(t, v.Generation, rc.Publish(v.At), "publish %d", publishes)
			require.Len(t, replayed.Snapshot().Workers, v.Workers)
		default:
			if _, ok := v.(events.DiscoveryReset); ok {
				resets++
			}
			rc.ApplyDiscovery(v)
		}
	}
	require.Equal(t, 2, resets, "the start and the replacement")
	require.Equal(t, live.Generation, replayed.Snapshot().Generation)
	require.Len(t, replayed.Snapshot().Workers, len(live.Workers))
	for i, w := range live.Workers {
		r := replayed.Snapshot().Workers[i]
		require.Equal(t, w.Key(), r.Key())
		require.True(t, w.FirstSeen.Equal(r.FirstSeen))
		require.True(t, w.LastUpdated.Equal(r.LastUpdated))
	}
}
