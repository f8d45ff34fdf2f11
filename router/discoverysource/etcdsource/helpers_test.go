package etcdsource

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/internal/etcdtest"
	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/events"
)

// recorder is a Sink that keeps everything it is handed.
type recorder struct {
	mu          sync.Mutex
	batches     [][]events.Event
	connected   bool
	transitions []bool
}

func (r *recorder) Apply(batch []events.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, append([]events.Event(nil), batch...))
}

func (r *recorder) SetConnected(up bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.connected = up
	r.transitions = append(r.transitions, up)
}

func (r *recorder) isConnected() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.connected
}

func (r *recorder) connectedHistory() []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.transitions...)
}

func (r *recorder) connectedTimes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, up := range r.transitions {
		if up {
			n++
		}
	}
	return n
}

// all returns every event received, in order.
func (r *recorder) all() []events.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []events.Event
	for _, b := range r.batches {
		out = append(out, b...)
	}
	return out
}

// resyncBatches returns the batches that carried snapshots.
func (r *recorder) resyncBatches() [][]events.DiscoveryResync {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]events.DiscoveryResync
	for _, b := range r.batches {
		var rs []events.DiscoveryResync
		for _, e := range b {
			if x, ok := e.(events.DiscoveryResync); ok {
				rs = append(rs, x)
			}
		}
		if len(rs) > 0 {
			out = append(out, rs)
		}
	}
	return out
}

// lastResync returns the newest snapshot of ns.
func (r *recorder) lastResync(ns string) (events.DiscoveryResync, bool) {
	bs := r.resyncBatches()
	for i := len(bs) - 1; i >= 0; i-- {
		for _, x := range bs[i] {
			if x.Namespace == ns {
				return x, true
			}
		}
	}
	return events.DiscoveryResync{}, false
}

// counter records the watcher's count callback.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[kind]++
}

func (c *counter) get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[kind]
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// harness runs one watcher for a test and stops it at cleanup.
type harness struct {
	w      *Watcher
	sink   *recorder
	counts *counter
}

// fastBackoff keeps wall-clock tests quick.
func fastBackoff(cfg Config) Config {
	cfg.BackoffInitial = 10 * time.Millisecond
	cfg.BackoffMax = 200 * time.Millisecond
	return cfg
}

func startWatcher(t *testing.T, cfg Config, clk clock.Clock, hook func()) *harness {
	t.Helper()
	h := &harness{sink: &recorder{}, counts: &counter{}}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	h.w = New(cfg, h.sink, clk, log, h.counts.add)
	h.w.beforeWatch = hook
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v after cancel", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
		if h.sink.isConnected() {
			t.Errorf("still connected after Run returned")
		}
	})
	return h
}

// put writes key=value with the test's writing client.
func put(t *testing.T, c *clientv3.Client, kv map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for k, v := range kv {
		if _, err := c.Put(ctx, k, v); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
}

func del(t *testing.T, c *clientv3.Client, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Delete(ctx, key); err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
}

func plainConfig(srv *etcdtest.Server, namespaces ...string) Config {
	return fastBackoff(Config{Endpoints: []string{srv.Endpoint()}, Namespaces: namespaces})
}

// Realistic Dynamo records (shapes from the wire fact sheet §1).

// workerID is an etcd lease id as Dynamo uses it for instance_id.
const workerID = 7465265302745285

func endpointRecord(ns, component string, id uint64) (string, string) {
	key := fmt.Sprintf("v1/instances/%s/%s/generate/%x", ns, component, id)
	val := fmt.Sprintf(`{"type":"Endpoint","namespace":%q,"component":%q,"endpoint":"generate","instance_id":%d,"transport":{"tcp":"127.0.0.1:31000/%x/%s/%s/generate"},"device_type":"cuda"}`,
		ns, component, id, id, ns, component)
	return key, val
}

func modelRecord(ns, component string, id uint64) (string, string) {
	key := fmt.Sprintf("v1/mdc/%s/%s/generate/%x", ns, component, id)
	val := fmt.Sprintf(`{"type":"Model","namespace":%q,"component":%q,"endpoint":"generate","instance_id":%d,"card_json":{"display_name":"Qwen/Qwen3-32B","worker_type":"Decode","kv_cache_block_size":64,"runtime_config":{"total_kv_blocks":12000,"max_num_seqs":256}}}`,
		ns, component, id)
	return key, val
}

// scopedChannel is the latest, scope-based event channel layout.
func scopedChannel(ns, component string, id uint64) (string, string) {
	key := fmt.Sprintf("v1/event_channels/namespace/%s/component/%s/topic/kv-events/%x", discovery.EncodeSegment(ns), component, id)
	val := fmt.Sprintf(`{"type":"EventChannel","scope":{"kind":"component","namespace":%q,"component":%q},"topic":"kv-events","instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://127.0.0.1:5557"}}}`,
		ns, component, id)
	return key, val
}

// legacyChannel is the older {ns}/{component}/{topic}/{id} layout.
func legacyChannel(ns, component string, id uint64) (string, string) {
	key := fmt.Sprintf("v1/event_channels/%s/%s/kv_metrics/%x", ns, component, id)
	val := fmt.Sprintf(`{"type":"EventChannel","namespace":%q,"component":%q,"topic":"kv_metrics","instance_id":%d,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://127.0.0.1:5558"}}}`,
		ns, component, id)
	return key, val
}

// fleet returns one decode worker's four records in namespace ns.
func fleet(ns string, id uint64) map[string]string {
	out := map[string]string{}
	for _, f := range []func(string, string, uint64) (string, string){endpointRecord, modelRecord, scopedChannel, legacyChannel} {
		k, v := f(ns, "decode", id)
		out[k] = v
	}
	return out
}

// asMap turns snapshot records into key -> value.
func asMap(recs []events.DiscoveryRecord) map[string]string {
	out := make(map[string]string, len(recs))
	for _, r := range recs {
		out[r.Key] = string(r.Value)
	}
	return out
}
