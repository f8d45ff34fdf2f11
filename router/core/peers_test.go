package core

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/registrar"
	"switchyard/router/active"
	"switchyard/router/events"
	"switchyard/router/picker"
	"switchyard/router/replica"
)

// replicaCore is a replica's core over two aggregated workers (0x21,
// 0x22) that publish no load samples, whose own changes are collected as
// its peers would receive them.
type replicaCore struct {
	*Core
	id     uint64
	seq    uint64
	outbox []replica.Event
	port   *collect
}

func newReplicaCore(t *testing.T, id uint64, o Options) *replicaCore {
	t.Helper()
	r := &replicaCore{id: id, port: &collect{}}
	o.Picker = picker.NameLoadTracked
	o.Port = r.port
	o.Hooks.Sync = func(ev replica.Event) {
		ev.Holds = slices.Clone(ev.Holds)
		r.outbox = append(r.outbox, ev)
	}
	c, err := New(o)
	require.NoError(t, err)
	var batch []events.Event
	for _, wid := range []uint64{0x21, 0x22} {
		w := registrar.Worker{Namespace: "ns", Component: "backend", WorkerType: "aggregated", Model: "m", BlockSize: 16,
			TotalKVBlocks: 1000, MaxNumBatchedTokens: 4096, MaxNumSeqs: 64, ContextLength: 8192, Transport: "127.0.0.1:9/x"}
		recs := registrar.Records(w, wid)
		for _, k := range slices.Sorted(maps.Keys(recs)) {
			ks := events.EventChannels
			switch {
			case strings.HasPrefix(k, "v1/instances/"):
				ks = events.Instances
			case strings.HasPrefix(k, "v1/mdc/"):
				ks = events.Models
			}
			batch = append(batch, events.DiscoveryPut{At: t0, Namespace: "ns", DiscoveryRecord: events.DiscoveryRecord{Keyspace: ks, Key: k, Value: recs[k]}})
		}
	}
	c.Discovery(batch)
	r.Core = c
	return r
}

// flush is what the replica's publisher sends: its changes since the last
// batch, through the wire format, as a peer decodes them.
func (r *replicaCore) flush(t *testing.T) replica.Batch {
	t.Helper()
	r.seq++
	b := replica.Batch{Replica: r.id, Seq: r.seq, Events: r.outbox}
	p, err := replica.Append(nil, &b)
	require.NoError(t, err)
	r.outbox = nil
	var out replica.Batch
	require.NoError(t, replica.Decode(p, &out))
	return out
}

func rank(w uint64) active.Rank { return active.Rank{Namespace: "ns", WorkerID: w} }

func req(id uint64) picker.Request {
	return picker.Request{ID: id, Model: "m", Namespaces: []string{"ns"}, PromptTokens: 1600, Now: t0}
}

// A request replica A routed is charged in replica B's account once B
// gets A's batch, and B's next pick avoids the rank A loaded; without the
// batch B picks that rank too. A's first token and end follow.
func TestPeerRequestsMoveThePick(t *testing.T) {
	a := newReplicaCore(t, 0xA, Options{})
	b := newReplicaCore(t, 0xB, Options{})
	lone := newReplicaCore(t, 0xC, Options{})

	selA, ok := a.Pick(Arrival{Req: req(1)})
	require.True(t, ok)
	selLone, _ := lone.Pick(Arrival{Req: req(1)})
	require.Equal(t, selA.Decode.WorkerID, selLone.Decode.WorkerID, "unsynced replicas pick alike")

	batch := a.flush(t)
	require.Len(t, batch.Events, 1)
	require.Equal(t, replica.Added, batch.Events[0].Kind)
	b.PeerBatch(PeerBatch{At: t0, Batch: batch})
	require.Equal(t, a.Active().Load(rank(selA.Decode.WorkerID)), b.Active().Load(rank(selA.Decode.WorkerID)),
		"B's account holds A's request as A's does")

	selB, ok := b.Pick(Arrival{Req: req(1)}) // B's own id 1 does not collide with A's 1
	require.True(t, ok)
	require.NotEqual(t, selA.Decode.WorkerID, selB.Decode.WorkerID, "B avoids the rank A just loaded")
	require.Equal(t, 2, b.Active().Len())

	a.FirstToken(FirstToken{At: t0, RequestID: 1})
	b.PeerBatch(PeerBatch{At: t0, Batch: a.flush(t)})
	require.Equal(t, active.Load{Blocks: 100, Requests: 1}, b.Active().Load(rank(selA.Decode.WorkerID)))

	a.Ended(req(1), selA, t0, EndedServed)
	b.PeerBatch(PeerBatch{At: t0, Batch: a.flush(t)})
	require.Equal(t, active.Load{}, b.Active().Load(rank(selA.Decode.WorkerID)))
	st := b.PeerStats()
	require.Equal(t, 1, st.Peers)
	require.Zero(t, st.Requests)
	require.EqualValues(t, 3, st.Batches)
	require.EqualValues(t, 3, st.Events)
}

// Gaps and unknown requests are counted; a silent peer is dropped at the
// tick PeerSilentAfter after its last batch, not before; a request whose
// end never arrives goes PeerRequestTTL after its last event, while its
// peer's heartbeats keep the peer followed. Ticks that act are recorded.
func TestPeerTimeRules(t *testing.T) {
	b := newReplicaCore(t, 0xB, Options{PeerSilentAfter: 10 * time.Second, PeerRequestTTL: time.Minute})
	hold := []active.Hold{{Rank: rank(0x21), PrefillTokens: 10, Blocks: 2}}
	b.PeerBatch(PeerBatch{At: t0, Batch: replica.Batch{Replica: 0xA, Seq: 1, Events: []replica.Event{{Kind: replica.Added, RequestID: 5, Holds: hold}}}})
	b.PeerBatch(PeerBatch{At: t0, Batch: replica.Batch{Replica: 0xA, Seq: 4, Events: []replica.Event{{Kind: replica.Ended, RequestID: 99}}}})
	st := b.PeerStats()
	require.EqualValues(t, 2, st.Gaps)
	require.EqualValues(t, 1, st.Refused["unknown"])
	require.Equal(t, active.Load{PrefillTokens: 10, Blocks: 2, Requests: 1}, b.Active().Load(rank(0x21)))

	// Heartbeats every 5 s keep A followed; its request expires at 1 min.
	at := t0
	for range 11 {
		at = at.Add(5 * time.Second)
		b.PeerBatch(PeerBatch{At: at, Batch: replica.Batch{Replica: 0xA, Seq: 5}})
		require.Zero(t, b.Tick(events.Tick{At: at}))
	}
	require.Equal(t, 1, b.PeerStats().Requests, "not yet expired at 55 s")
	at = t0.Add(time.Minute)
	b.PeerBatch(PeerBatch{At: at, Batch: replica.Batch{Replica: 0xA, Seq: 6}})
	b.Tick(events.Tick{At: at})
	require.Equal(t, active.Load{}, b.Active().Load(rank(0x21)))
	st = b.PeerStats()
	require.EqualValues(t, 1, st.Expired)
	require.Equal(t, 1, st.Peers)

	// A falls silent with a request charged.
	b.PeerBatch(PeerBatch{At: at, Batch: replica.Batch{Replica: 0xA, Seq: 7, Events: []replica.Event{{Kind: replica.Added, RequestID: 6, Holds: hold}}}})
	n := len(b.port.outs)
	b.Tick(events.Tick{At: at.Add(10*time.Second - time.Millisecond)})
	require.Len(t, b.port.outs, n, "a tick that acts on nothing is not recorded")
	require.Equal(t, 1, b.PeerStats().Peers)
	b.Tick(events.Tick{At: at.Add(10 * time.Second)})
	require.IsType(t, events.Tick{}, b.port.outs[n], "the tick that dropped the peer is recorded")
	st = b.PeerStats()
	require.Zero(t, st.Peers)
	require.Zero(t, st.Requests)
	require.EqualValues(t, 1, st.Dropped)
	require.Zero(t, b.Active().Len())
}

// A peer's requests are bounded per peer, and what a peer claims is
// bounded too.
func TestPeerBounds(t *testing.T) {
	b := newReplicaCore(t, 0xB, Options{})
	var id uint64
	for seq := uint64(1); id <= MaxRequestsPerPeer; seq++ {
		batch := replica.Batch{Replica: 0xA, Seq: seq}
		for range replica.MaxEvents {
			id++
			// Alternate ranks: one rank holds at most active.MaxPerRank.
			h := []active.Hold{{Rank: rank(0x21 + id%2), Blocks: 1}}
			batch.Events = append(batch.Events, replica.Event{Kind: replica.Added, RequestID: id, Holds: h})
		}
		b.PeerBatch(PeerBatch{At: t0, Batch: batch})
	}
	st := b.PeerStats()
	require.Equal(t, MaxRequestsPerPeer, st.Requests)
	require.EqualValues(t, id-MaxRequestsPerPeer, st.Refused["peer_full"])

	huge := []active.Hold{{Rank: rank(0x23), Blocks: maxPeerHoldValue + 1}}
	b.PeerBatch(PeerBatch{At: t0, Batch: replica.Batch{Replica: 0xC, Seq: 1, Events: []replica.Event{{Kind: replica.Added, RequestID: 1, Holds: huge}}}})
	require.EqualValues(t, 1, b.PeerStats().Refused["implausible"])
	require.Equal(t, active.Load{}, b.Active().Load(rank(0x23)))

	hold := []active.Hold{{Rank: rank(0x21), Blocks: 1}}
	// Untracked cores charge nothing for peers either.
	off, err := New(Options{Picker: picker.NameLoad})
	require.NoError(t, err)
	off.PeerBatch(PeerBatch{At: t0, Batch: replica.Batch{Replica: 0xA, Seq: 1, Events: []replica.Event{{Kind: replica.Added, RequestID: 1, Holds: hold}}}})
	require.Zero(t, off.Active().Len())
	require.EqualValues(t, 1, off.PeerStats().Refused["untracked"])
}
