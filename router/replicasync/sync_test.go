package replicasync

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/registrar"
	"switchyard/router/active"
	"switchyard/router/clock"
	"switchyard/router/core"
	"switchyard/router/events"
	"switchyard/router/picker"
)

// replicaUnderTest is one router replica: a core that tracks active
// sequences over two aggregated workers (0x21, 0x22, no load samples), and
// its replica-sync host on a loopback port.
type replicaUnderTest struct {
	core *core.Shared
	sync *Sync
	m    *Metrics
}

func startReplicas(t *testing.T, n int, silentAfter time.Duration) []*replicaUnderTest {
	t.Helper()
	reps := newReplicas(t, n, silentAfter, Options{Listen: "127.0.0.1:0"})
	for i, r := range reps {
		for j, p := range reps {
			if i != j {
				r.sync.opts.Peers = append(r.sync.opts.Peers, p.sync.Addr())
			}
		}
		// Its own address listed too, as one list for every replica
		// would: the replica recognises itself and stops reading it.
		r.sync.opts.Peers = append(r.sync.opts.Peers, r.sync.Addr())
		r.sync.Start(r.core)
		t.Cleanup(r.sync.Close)
	}
	for _, r := range reps {
		eventually(t, "every replica follows every peer", func() bool {
			return testutil.ToFloat64(r.m.PeersConnected) == float64(n-1) && testutil.ToFloat64(r.m.Subscribers) >= float64(n-1)
		})
	}
	return reps
}

// newReplicas makes n replicas (a core and its Sync, not started) with
// the transport settings of o.
func newReplicas(t *testing.T, n int, silentAfter time.Duration, o Options) []*replicaUnderTest {
	t.Helper()
	now := time.Now()
	var reps []*replicaUnderTest
	for range n {
		m := NewMetrics()
		o := o
		o.Namespace, o.Metrics, o.Heartbeat = "ns", m, 50*time.Millisecond
		s, err := New(o)
		require.NoError(t, err)
		c, err := core.New(core.Options{Picker: picker.NameLoadTracked, PeerSilentAfter: silentAfter,
			Hooks: core.Hooks{Sync: s.Publish, PeerGap: m.CountGap, PeerRefused: m.CountRefused}})
		require.NoError(t, err)
		c.Discovery(workers(now))
		reps = append(reps, &replicaUnderTest{core: core.NewShared(c, clock.Real{}), sync: s, m: m})
	}
	return reps
}

func workers(at time.Time) []events.Event {
	var batch []events.Event
	for _, id := range []uint64{0x21, 0x22} {
		w := registrar.Worker{Namespace: "ns", Component: "backend", WorkerType: "aggregated", Model: "m", BlockSize: 16,
			TotalKVBlocks: 1000, MaxNumBatchedTokens: 4096, MaxNumSeqs: 64, ContextLength: 8192, Transport: "127.0.0.1:9/x"}
		recs := registrar.Records(w, id)
		for _, k := range slices.Sorted(maps.Keys(recs)) {
			ks := events.EventChannels
			switch {
			case strings.HasPrefix(k, "v1/instances/"):
				ks = events.Instances
			case strings.HasPrefix(k, "v1/mdc/"):
				ks = events.Models
			}
			batch = append(batch, events.DiscoveryPut{At: at, Namespace: "ns", DiscoveryRecord: events.DiscoveryRecord{Keyspace: ks, Key: k, Value: recs[k]}})
		}
	}
	return batch
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func request(id uint64) picker.Request {
	return picker.Request{ID: id, Model: "m", Namespaces: []string{"ns"}, PromptTokens: 1600, Now: time.Now()}
}

func rank(w uint64) active.Rank { return active.Rank{Namespace: "ns", WorkerID: w} }

// Three replicas over real ZMQ on loopback: a request replica A routed
// shows up in B's and C's accounts within a bounded wait, and B's next
// pick avoids the rank A loaded; B's request reaches C too, and A's end
// leaves its peers' accounts. A stopped replica's requests age out of its
// peers' accounts.
func TestReplicasShareTheirActiveRequests(t *testing.T) {
	reps := startReplicas(t, 3, 300*time.Millisecond)
	shareActiveRequests(t, reps)
}

// shareActiveRequests is the three-replica scenario, whatever the
// transport.
func shareActiveRequests(t *testing.T, reps []*replicaUnderTest) {
	t.Helper()
	a, b, c := reps[0], reps[1], reps[2]

	selA, ok := a.core.Pick(request(1))
	require.True(t, ok)
	loaded := rank(selA.Decode.WorkerID)
	want := a.core.ActiveLoad(loaded)
	require.NotZero(t, want.PrefillTokens)
	for _, r := range []*replicaUnderTest{b, c} {
		eventually(t, "A's request in a peer's account", func() bool { return r.core.ActiveLoad(loaded) == want })
	}
	selB, ok := b.core.Pick(request(1)) // the same local id as A's: no collision
	require.True(t, ok)
	require.NotEqual(t, selA.Decode.WorkerID, selB.Decode.WorkerID, "B avoids the rank A just loaded")
	eventually(t, "B's request in C's account", func() bool {
		return c.core.ActiveLoad(rank(selB.Decode.WorkerID)).Requests == 1
	})

	a.core.FirstToken(1)
	a.core.Finished(request(1), selA)
	eventually(t, "A's end in B's account", func() bool { return b.core.ActiveLoad(loaded) == active.Load{} })
	require.Greater(t, testutil.ToFloat64(a.m.Published), 2.0)
	require.GreaterOrEqual(t, testutil.ToFloat64(b.m.Received), 3.0)
	require.Zero(t, testutil.ToFloat64(b.m.Gaps))

	// C routes one more, then stops: its peers drop it once it has been
	// silent for PeerSilentAfter, at their ticks.
	selC, ok := c.core.Pick(request(7))
	require.True(t, ok)
	cRank := rank(selC.Decode.WorkerID)
	eventually(t, "C's request in A's account", func() bool { return a.core.ActiveLoad(cRank).Requests >= 1 })
	before := a.core.ActiveLoad(cRank).Requests
	c.sync.Close()
	eventually(t, "C's requests age out of A's account", func() bool {
		a.core.Tick(time.Now())
		return a.core.ActiveLoad(cRank).Requests == before-1 && a.core.PeerStats().Peers == 1
	})
	require.EqualValues(t, 1, a.core.PeerStats().Dropped)
}

// SetPeers changes whom a running replica follows: a peer added is
// followed and its requests arrive, a peer removed is let go.
func TestSetPeersFollowsAndLetsGo(t *testing.T) {
	reps := newReplicas(t, 2, time.Minute, Options{Listen: "127.0.0.1:0"})
	a, b := reps[0], reps[1]
	for _, r := range reps {
		r.sync.Start(r.core)
		t.Cleanup(r.sync.Close)
	}
	require.Zero(t, testutil.ToFloat64(b.m.PeersConnected))
	b.sync.SetPeers([]string{a.sync.Addr()})
	eventually(t, "B follows A", func() bool { return testutil.ToFloat64(b.m.PeersConnected) == 1 })
	sel, ok := a.core.Pick(request(1))
	require.True(t, ok)
	eventually(t, "A's request in B's account", func() bool { return b.core.ActiveLoad(rank(sel.Decode.WorkerID)).Requests == 1 })

	b.sync.SetPeers([]string{a.sync.Addr()}) // the same peers: nothing changes
	require.Equal(t, []string{a.sync.Addr()}, b.sync.Peers())
	require.EqualValues(t, 1, testutil.ToFloat64(b.m.PeersConnected))
	require.EqualValues(t, 1, testutil.ToFloat64(a.m.Subscribers), "not dialled again")
	b.sync.SetPeers(nil)
	eventually(t, "B lets A go", func() bool {
		return testutil.ToFloat64(b.m.PeersConnected) == 0 && testutil.ToFloat64(a.m.Subscribers) == 0
	})
}
