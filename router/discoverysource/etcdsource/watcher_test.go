package etcdsource

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/internal/etcdtest"
	"switchyard/router/clock"
	"switchyard/router/events"
)

var epoch = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func TestSnapshotHoldsExactlyTheNamespacesRecords(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	want := fleet("dynamo", workerID)
	put(t, c, want)
	// Neighbours that must stay out: a sibling namespace sharing the name
	// as a prefix, an unwatched namespace, a legacy-layout key with the
	// wrong segment count, and a key outside Dynamo's buckets.
	put(t, c, fleet("dynamo2", workerID+1))
	put(t, c, fleet("other", workerID+2))
	put(t, c, map[string]string{
		"v1/event_channels/dynamo/decode/kv_metrics/1f/extra": `{}`,
		"v1/instancesX/dynamo/decode/generate/1f":             `{}`,
		"dynamo/unrelated": `x`,
	})

	h := startWatcher(t, plainConfig(srv, "dynamo"), clock.NewManual(epoch), nil)
	eventually(t, 20*time.Second, "connected", h.sink.isConnected)

	batches := h.sink.resyncBatches()
	require.Len(t, batches, 1)
	require.Len(t, batches[0], 1)
	rs := batches[0][0]
	assert.Equal(t, "dynamo", rs.Namespace)
	assert.Equal(t, epoch, rs.At, "At comes from the watcher's clock")
	assert.Positive(t, rs.Revision)
	assert.Equal(t, want, asMap(rs.Records))
	for _, r := range rs.Records {
		switch {
		case strings.HasPrefix(r.Key, "v1/instances/"):
			assert.Equal(t, events.Instances, r.Keyspace, r.Key)
		case strings.HasPrefix(r.Key, "v1/mdc/"):
			assert.Equal(t, events.Models, r.Keyspace, r.Key)
		default:
			assert.Equal(t, events.EventChannels, r.Keyspace, r.Key)
		}
	}
	assert.Equal(t, 1, h.counts.get(KindResync))
	st := h.w.Status()
	assert.True(t, st.Connected)
	assert.Equal(t, uint64(1), st.Passes)
	assert.Equal(t, uint64(0), h.w.Restarts())
}

func TestSeveralNamespacesEachGetTheirOwnResync(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	prod, canary := fleet("prod", workerID), fleet("canary.v2", workerID+1)
	put(t, c, prod)
	put(t, c, canary)

	h := startWatcher(t, plainConfig(srv, "prod", "canary.v2", "empty"), clock.Real{}, nil)
	eventually(t, 20*time.Second, "connected", h.sink.isConnected)

	batches := h.sink.resyncBatches()
	require.Len(t, batches, 1, "one batch per pass")
	require.Len(t, batches[0], 3)
	got := map[string]map[string]string{}
	rev := batches[0][0].Revision
	for _, rs := range batches[0] {
		got[rs.Namespace] = asMap(rs.Records)
		assert.Equal(t, rev, rs.Revision, "all namespaces read at one revision")
	}
	assert.Equal(t, prod, got["prod"])
	assert.Equal(t, canary, got["canary.v2"])
	assert.Empty(t, got["empty"])

	// Live events carry the namespace of the prefix they came from.
	k, v := endpointRecord("canary.v2", "prefill", 99)
	put(t, c, map[string]string{k: v})
	eventually(t, 10*time.Second, "canary put", func() bool {
		for _, e := range h.sink.all() {
			if p, ok := e.(events.DiscoveryPut); ok && p.Key == k {
				return p.Namespace == "canary.v2"
			}
		}
		return false
	})
}

func TestLivePutAndDeleteArriveAsEvents(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	clk := clock.NewManual(epoch)
	h := startWatcher(t, plainConfig(srv, "dynamo"), clk, nil)
	eventually(t, 20*time.Second, "connected", h.sink.isConnected)
	clk.Advance(time.Minute) // live events are stamped with the clock's time

	sibling, _ := endpointRecord("dynamo2", "decode", 5)
	scopedKey, scopedVal := scopedChannel("dynamo", "decode", workerID)
	legacyKey, legacyVal := legacyChannel("dynamo", "decode", workerID)
	instKey, instVal := endpointRecord("dynamo", "decode", workerID)
	put(t, c, map[string]string{sibling: `{}`})
	put(t, c, map[string]string{scopedKey: scopedVal})
	put(t, c, map[string]string{legacyKey: legacyVal})
	put(t, c, map[string]string{instKey: instVal})
	del(t, c, instKey)

	eventually(t, 10*time.Second, "delete event", func() bool {
		evs := h.sink.all()
		_, ok := evs[len(evs)-1].(events.DiscoveryDelete)
		return ok
	})
	var puts []events.DiscoveryPut
	var dels []events.DiscoveryDelete
	for _, e := range h.sink.all() {
		switch x := e.(type) {
		case events.DiscoveryPut:
			puts = append(puts, x)
		case events.DiscoveryDelete:
			dels = append(dels, x)
		}
	}
	require.Len(t, puts, 3, "the sibling namespace's put must not arrive")
	// Each prefix has its own watch stream: order holds within a stream,
	// not across streams, so compare in revision order.
	sort.Slice(puts, func(i, j int) bool { return puts[i].Revision < puts[j].Revision })
	assert.Equal(t, events.DiscoveryRecord{Keyspace: events.EventChannels, Key: scopedKey, Value: []byte(scopedVal)}, puts[0].DiscoveryRecord)
	assert.Equal(t, events.DiscoveryRecord{Keyspace: events.EventChannels, Key: legacyKey, Value: []byte(legacyVal)}, puts[1].DiscoveryRecord)
	assert.Equal(t, events.DiscoveryRecord{Keyspace: events.Instances, Key: instKey, Value: []byte(instVal)}, puts[2].DiscoveryRecord)
	require.Len(t, dels, 1)
	assert.Equal(t, events.DiscoveryDelete{
		At: epoch.Add(time.Minute), Namespace: "dynamo", Keyspace: events.Instances, Key: instKey, Revision: dels[0].Revision,
	}, dels[0])
	for _, p := range puts {
		assert.Equal(t, "dynamo", p.Namespace)
		assert.Equal(t, epoch.Add(time.Minute), p.At)
	}
	assert.Less(t, puts[0].Revision, puts[1].Revision)
	assert.Less(t, puts[2].Revision, dels[0].Revision)
}

func TestLapsedLeaseArrivesAsDelete(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	h := startWatcher(t, plainConfig(srv, "dynamo"), clock.Real{}, nil)
	eventually(t, 20*time.Second, "connected", h.sink.isConnected)

	// A worker that dies stops renewing its lease; etcd then deletes its
	// keys and the router must see an ordinary delete.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := c.Grant(ctx, 2)
	require.NoError(t, err)
	key, val := endpointRecord("dynamo", "decode", uint64(lease.ID))
	_, err = c.Put(ctx, key, val, clientv3.WithLease(lease.ID))
	require.NoError(t, err)

	seen := func(want func(events.Event) bool) func() bool {
		return func() bool {
			for _, e := range h.sink.all() {
				if want(e) {
					return true
				}
			}
			return false
		}
	}
	eventually(t, 10*time.Second, "put", seen(func(e events.Event) bool {
		p, ok := e.(events.DiscoveryPut)
		return ok && p.Key == key
	}))
	eventually(t, 15*time.Second, "delete after lease expiry", seen(func(e events.Event) bool {
		d, ok := e.(events.DiscoveryDelete)
		return ok && d.Key == key && d.Namespace == "dynamo" && d.Keyspace == events.Instances
	}))
}

func TestCompactionBetweenSeedAndWatchForcesAResync(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	put(t, c, fleet("dynamo", workerID))
	late := fleet("dynamo", workerID+1)

	var once sync.Once
	hook := func() {
		once.Do(func() {
			// Changes after the snapshot, then compacted away: the watch
			// from snapshot+1 cannot deliver them and must fail.
			put(t, c, late)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := c.Get(ctx, "anything")
			require.NoError(t, err)
			_, err = c.Compact(ctx, resp.Header.Revision)
			require.NoError(t, err)
		})
	}
	h := startWatcher(t, plainConfig(srv, "dynamo"), clock.Real{}, hook)
	// etcd confirms a watch's creation before it notices the start revision
	// is compacted, so the first pass may report connected for a moment;
	// what matters is that it ends and a second pass reconnects.
	eventually(t, 20*time.Second, "second pass connected", func() bool {
		return h.counts.get(KindCompacted) == 1 && h.counts.get(KindResync) == 2 && h.sink.isConnected()
	})
	assert.Equal(t, 0, h.counts.get(KindConnectFailed))
	assert.Equal(t, 0, h.counts.get(KindWatchEnded))
	rs, ok := h.sink.lastResync("dynamo")
	require.True(t, ok)
	all := maps.Clone(fleet("dynamo", workerID))
	maps.Copy(all, late)
	assert.Equal(t, all, asMap(rs.Records))
	assert.Contains(t, h.w.Status().LastError, "compacted")
}

func TestRestartDisconnectsThenResyncs(t *testing.T) {
	srv := etcdtest.Start(t)
	gone, _ := endpointRecord("dynamo", "decode", workerID)
	put(t, srv.Client(t), fleet("dynamo", workerID))
	clk := clock.NewManual(epoch)
	h := startWatcher(t, plainConfig(srv, "dynamo"), clk, nil)
	eventually(t, 20*time.Second, "connected", h.sink.isConnected)

	srv.Stop()
	eventually(t, 20*time.Second, "disconnected, pass counted as ended", func() bool {
		return !h.sink.isConnected() && h.counts.get(KindWatchEnded) == 1
	})
	// The watcher now waits out its backoff on the manual clock, so the
	// changes below happen before its next pass and must be in its resync.
	stop := make(chan struct{})
	defer close(stop)
	require.True(t, clk.WaitForTimers(1, stop))

	srv.Restart(t)
	c := srv.Client(t)
	del(t, c, gone)
	newKey, newVal := endpointRecord("dynamo", "prefill", workerID+7)
	put(t, c, map[string]string{newKey: newVal})

	eventually(t, 30*time.Second, "reconnected", func() bool {
		if clk.Pending() > 0 {
			clk.Advance(time.Minute) // past any backoff
		}
		return h.sink.isConnected()
	})
	rs, ok := h.sink.lastResync("dynamo")
	require.True(t, ok)
	got := asMap(rs.Records)
	assert.NotContains(t, got, gone)
	assert.Equal(t, newVal, got[newKey])
	assert.Equal(t, []bool{true, false, true}, h.sink.connectedHistory())
	assert.GreaterOrEqual(t, h.w.Restarts(), uint64(1))
	st := h.w.Status()
	assert.NotContains(t, st.LastError, "127.0.0.1", "status must not leak addresses")
}

func TestSnapshotPagesAndCapsAPrefix(t *testing.T) {
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	// More keys than the cap, written in transactions of etcd's maximum
	// size so setup stays fast.
	const n = maxSeedRecords + 40
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < n; {
		var ops []clientv3.Op
		for ; i < n && len(ops) < 128; i++ {
			k, v := endpointRecord("big", "decode", uint64(i+1))
			ops = append(ops, clientv3.OpPut(k, v))
		}
		_, err := c.Txn(ctx).Then(ops...).Commit()
		require.NoError(t, err)
	}
	small := fleet("big", 1<<40)
	delete(small, "v1/instances/big/decode/generate/10000000000")
	put(t, c, small)

	h := startWatcher(t, plainConfig(srv, "big"), clock.Real{}, nil)
	eventually(t, 30*time.Second, "connected", h.sink.isConnected)
	rs, ok := h.sink.lastResync("big")
	require.True(t, ok)
	var inst int
	for _, r := range rs.Records {
		if r.Keyspace == events.Instances {
			inst++
		}
	}
	assert.Equal(t, maxSeedRecords, inst, "instances prefix is capped")
	assert.Len(t, rs.Records, maxSeedRecords+len(small), "other prefixes are read in full")
	assert.Equal(t, 1, h.counts.get(KindSeedTruncated))
}

// Fleet-written values are read in pages small enough to fit the response
// ceiling, and a value too large to read at all is skipped, not fatal.
func TestSnapshotShrinksPagesAndSkipsHugeValues(t *testing.T) {
	old := maxResponseBytes
	maxResponseBytes = 256 << 10
	t.Cleanup(func() { maxResponseBytes = old })
	srv := etcdtest.Start(t)
	c := srv.Client(t)
	pad := strings.Repeat("x", 40<<10)
	kvs := map[string]string{}
	for i := 1; i <= 20; i++ {
		k, _ := endpointRecord("dynamo", "decode", uint64(i))
		kvs[k] = fmt.Sprintf(`{"type":"Endpoint","component":"decode","endpoint":"generate","instance_id":%d,"pad":%q}`, i, pad)
	}
	huge, _ := endpointRecord("dynamo", "decode", 10) // sorts among the others
	kvs[huge+"0"] = `{"pad":"` + strings.Repeat("y", 300<<10) + `"}`
	put(t, c, kvs)

	h := startWatcher(t, plainConfig(srv, "dynamo"), clock.Real{}, nil)
	eventually(t, 30*time.Second, "connected", h.sink.isConnected)
	rs, ok := h.sink.lastResync("dynamo")
	require.True(t, ok)
	assert.Len(t, rs.Records, 20, "every readable record arrives")
	for _, r := range rs.Records {
		assert.NotEqual(t, huge+"0", r.Key)
	}
	assert.Equal(t, 1, h.counts.get(KindSeedOversized))
}
