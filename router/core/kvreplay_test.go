package core

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"switchyard/router/discovery"
	"switchyard/router/events"
	"switchyard/router/kv"
	"switchyard/router/picker"
)

const (
	replayWorker uint64 = 0xa
	replayPub    uint64 = 101
)

var replayT0 = time.Unix(1_700_000_000, 0).UTC()

// replayCore is a KV core following one Dynamo publisher of one worker
// with two ranks, whose publisher offers replay when replay is set.
func replayCore(t testing.TB, s KVReplaySettings, replay bool) (*Core, *outputs, *[]events.KVReplayWanted) {
	t.Helper()
	port := &outputs{}
	wanted := &[]events.KVReplayWanted{}
	c, err := New(Options{Picker: picker.NameKV, Port: port, KVReplay: s,
		Hooks: Hooks{KVReplayWanted: func(w events.KVReplayWanted) { *wanted = append(*wanted, w) }}})
	require.NoError(t, err)
	c.kv.SetLive(&discovery.Snapshot{View: discovery.View{Workers: []*discovery.Worker{
		{Namespace: "dynamo", InstanceID: replayWorker, Runtime: discovery.RuntimeConfig{DPSize: 2}},
	}}})
	c.KVSubscribed(events.KVSubscribed{At: replayT0, Namespace: "dynamo", PublisherID: replayPub, Replay: replay})
	c.KVConnected(events.KVConnected{At: replayT0, Namespace: "dynamo", PublisherID: replayPub})
	return c, port, wanted
}

var replayOn = KVReplaySettings{Enabled: true}

// stream is the publisher's messages 1..n: message i stores block 100+i
// on rank i%2, as that rank's next event.
func stream(n int) []*events.KVMessage {
	out := make([]*events.KVMessage, n+1)
	ids := [2]uint64{}
	for i := 1; i <= n; i++ {
		r := uint32(i % 2)
		ids[r]++
		out[i] = storeBlock(replayT0.Add(time.Duration(i)*time.Millisecond), replayPub, uint64(i), replayWorker, r, ids[r], 100+uint64(i))
	}
	return out
}

func replayed(m *events.KVMessage, at time.Time) *events.KVReplayMessage {
	return &events.KVReplayMessage{At: at, Namespace: m.Namespace, PublisherID: m.PublisherID, Frames: m.Frames}
}

func end(at time.Time, errText string) events.KVReplayEnd {
	return events.KVReplayEnd{At: at, Namespace: "dynamo", PublisherID: replayPub, Err: errText}
}

// reference is the index a core holds after every message in order.
func reference(t *testing.T, msgs []*events.KVMessage) kv.Stats {
	c, _, _ := replayCore(t, KVReplaySettings{}, false)
	for _, m := range msgs[1:] {
		require.Equal(t, "applied", c.KVMessage(m))
	}
	return c.kv.Stats()
}

func finished(port *outputs) []KVReplayFinished {
	var out []KVReplayFinished
	for _, o := range port.got {
		if f, ok := o.(KVReplayFinished); ok {
			out = append(out, f)
		}
	}
	return out
}

// A gap asks for the missed messages and holds what follows; a replay
// that fills it leaves the index as if nothing had been lost, with no
// gap and nothing cleared.
func TestKVReplayFillsGap(t *testing.T) {
	c, port, wanted := replayCore(t, replayOn, true)
	msgs := stream(8)
	for _, i := range []int{1, 2, 3} {
		require.Equal(t, "applied", c.KVMessage(msgs[i]))
	}
	at := replayT0.Add(time.Second)
	require.Equal(t, KVHeld, c.KVMessage(msgs[6]), "4 and 5 were lost")
	require.Equal(t, []events.KVReplayWanted{{At: msgs[6].At, Namespace: "dynamo", PublisherID: replayPub, From: 4, To: 5}}, *wanted)
	require.Equal(t, KVHeld, c.KVMessage(msgs[7]), "held behind the gap")
	require.Equal(t, "applied", c.KVReplayed(replayed(msgs[4], at)))
	require.Equal(t, "applied", c.KVReplayed(replayed(msgs[5], at)))
	c.KVReplayEnd(end(at, ""))
	require.Equal(t, "applied", c.KVMessage(msgs[8]), "after the release, messages pass again")

	require.Equal(t, reference(t, msgs), c.kv.Stats())
	require.Zero(t, c.KVResults()["gap"])
	require.Equal(t, map[string]uint64{ReplayRequested: 1, ReplayRecovered: 2}, c.KVReplayCounts())
	require.Equal(t, []KVReplayFinished{{At: at, Namespace: "dynamo", PublisherID: replayPub, From: 4, To: 5, Reason: FinishedEnd,
		Recovered: 2, Held: 2}}, finished(port))
	require.Len(t, *wanted, 1)
}

// A jump of the sequence wider than any replay buffer (a hostile
// publisher, or one that numbers anew) is not asked for: it counts as an
// overflow, its loss is capped, and the tracker's gap clears the rank as
// without replay.
func TestKVReplayWideGapNotAskedFor(t *testing.T) {
	c, _, wanted := replayCore(t, replayOn, true)
	msgs := stream(3)
	require.Equal(t, "applied", c.KVMessage(msgs[1]))
	far := storeBlock(replayT0.Add(time.Second), replayPub, 1<<62, replayWorker, 1, 5, 900)
	require.Equal(t, "gap", c.KVMessage(far))
	require.Empty(t, *wanted)
	require.Equal(t, map[string]uint64{ReplayOverflow: 1, ReplayLost: KVReplayMaxGap}, c.KVReplayCounts())
	next := storeBlock(replayT0.Add(2*time.Second), replayPub, 1<<62+1, replayWorker, 1, 6, 901)
	require.Equal(t, "applied", c.KVMessage(next), "the stream goes on from the new sequence")
	require.Empty(t, *wanted)
}

// What a replay does not bring back is lost: the tracker sees the gap
// and clears the rank, as without replay, and the loss is counted.
func TestKVReplayPartial(t *testing.T) {
	c, port, _ := replayCore(t, replayOn, true)
	msgs := stream(8)
	for _, i := range []int{1, 2, 3} {
		c.KVMessage(msgs[i])
	}
	require.Equal(t, KVHeld, c.KVMessage(msgs[7]))
	at := replayT0.Add(time.Second)
	// The publisher's buffer no longer held 4: it replays 5 and 6.
	c.KVReplayed(replayed(msgs[5], at))
	c.KVReplayed(replayed(msgs[6], at))
	c.KVReplayEnd(end(at, ""))
	c.KVMessage(msgs[8])

	require.Equal(t, map[string]uint64{ReplayRequested: 1, ReplayRecovered: 2, ReplayLost: 1}, c.KVReplayCounts())
	require.Equal(t, uint64(1), c.KVResults()["gap"], "rank 0 missed event 2 and was cleared")
	require.Equal(t, uint64(1), finished(port)[0].Lost)
	// Rank 0 (even messages) holds only what came after the loss; rank 1
	// lost nothing.
	require.Equal(t, 6, blocksOf(c.kv, replayWorker), "rank 1: 1, 3, 5, 7; rank 0: 6, 8, since 4's loss cleared 2")
}

// A replay that does not end by the deadline ends at the next tick past
// it: what was missed is lost and the held messages are released.
func TestKVReplayTimeout(t *testing.T) {
	c, port, _ := replayCore(t, KVReplaySettings{Enabled: true, Timeout: 500 * time.Millisecond}, true)
	msgs := stream(6)
	c.KVMessage(msgs[1])
	c.KVMessage(msgs[2])
	require.Equal(t, KVHeld, c.KVMessage(msgs[5]))
	start := msgs[5].At
	require.Zero(t, c.Tick(events.Tick{At: start.Add(499 * time.Millisecond)}))
	require.Equal(t, KVHeld, c.KVMessage(msgs[6]), "still recovering before the deadline")
	require.Zero(t, port.ticks())
	c.Tick(events.Tick{At: start.Add(500 * time.Millisecond)})
	require.Zero(t, port.ticks(), "a tick that only ends recoveries is not recorded")

	require.Equal(t, map[string]uint64{ReplayRequested: 1, ReplayTimeout: 1, ReplayLost: 2}, c.KVReplayCounts())
	require.Equal(t, uint64(2), c.KVResults()["gap"], "both ranks missed an event")
	f := finished(port)
	require.Len(t, f, 1)
	require.Equal(t, FinishedTimeout, f[0].Reason)
	require.Equal(t, 2, f[0].Held)
	// A replayed message after the end fills nothing.
	require.Equal(t, ReplayUnexpected, c.KVReplayed(replayed(msgs[3], start.Add(time.Second))))
	require.Equal(t, uint64(1), c.KVReplayCounts()[ReplayUnexpected])
}

// Past the bound on held messages the recovery gives up: everything held
// is released in order and the gap is lost; the next gap asks again.
func TestKVReplayOverflow(t *testing.T) {
	c, port, wanted := replayCore(t, KVReplaySettings{Enabled: true, MaxHeldMessages: 3}, true)
	msgs := stream(12)
	c.KVMessage(msgs[1])
	for _, i := range []int{3, 4, 5} {
		require.Equal(t, KVHeld, c.KVMessage(msgs[i]))
	}
	require.Equal(t, "applied", c.KVMessage(msgs[6]), "the fourth held message overflows: all are released")
	require.Equal(t, FinishedOverflow, finished(port)[0].Reason)
	require.Equal(t, map[string]uint64{ReplayRequested: 1, ReplayOverflow: 1, ReplayLost: 1}, c.KVReplayCounts())
	require.Equal(t, KVHeld, c.KVMessage(msgs[8]), "a later gap is recovered again")
	require.Len(t, *wanted, 2)
	require.Equal(t, events.KVReplayWanted{At: msgs[8].At, Namespace: "dynamo", PublisherID: replayPub, From: 7, To: 7}, (*wanted)[1])

	// The byte bound: one message larger than the frames one recovery
	// may hold is released at once.
	big := *msgs[9]
	big.Frames = append(append([][]byte{}, big.Frames[:3]...), make([]byte, KVReplayMaxHeldBytes+1))
	require.Equal(t, "unknown_version", c.KVMessage(&big), "released at once, then refused by the decoder")
	require.Equal(t, uint64(2), c.KVReplayCounts()[ReplayOverflow])
}

// The frames all recoveries hold together are bounded too: a second
// subscription's recovery overflows when the first holds the budget, and
// finishing a recovery returns its share.
func TestKVReplayTotalBound(t *testing.T) {
	c, _, _ := replayCore(t, replayOn, true)
	other := replayPub + 1
	c.KVSubscribed(events.KVSubscribed{At: replayT0, Namespace: "dynamo", PublisherID: other, Replay: true})
	msgs := stream(4)
	size := framesSize(msgs[3].Frames)
	c.heldBytesCap = size + size/2
	c.KVMessage(msgs[1])
	require.Equal(t, KVHeld, c.KVMessage(msgs[3]))
	require.Equal(t, size, c.heldBytes)
	on := func(m *events.KVMessage) *events.KVMessage {
		return storeBlock(m.At, other, binary.BigEndian.Uint64(m.Frames[2]), replayWorker, 0, 9, 900)
	}
	c.KVMessage(on(msgs[1]))
	require.NotEqual(t, KVHeld, c.KVMessage(on(msgs[3])), "no room left: released at once")
	require.Equal(t, uint64(1), c.KVReplayCounts()[ReplayOverflow])
	c.KVReplayEnd(end(replayT0, ""))
	require.Zero(t, c.heldBytes)
}

// Replayed messages the recovery does not miss are counted and dropped:
// ones already applied, ones beyond the range, ones nobody asked for.
func TestKVReplayDuplicatesAndStrays(t *testing.T) {
	c, _, _ := replayCore(t, replayOn, true)
	msgs := stream(8)
	at := replayT0.Add(time.Second)
	require.Equal(t, ReplayUnexpected, c.KVReplayed(replayed(msgs[1], at)), "no recovery")
	c.KVReplayEnd(end(at, "")) // a late end: nothing to end
	require.Equal(t, map[string]uint64{ReplayUnexpected: 1}, c.KVReplayCounts())

	c.KVMessage(msgs[1])
	c.KVMessage(msgs[2])
	require.Equal(t, KVHeld, c.KVMessage(msgs[5]))
	require.Equal(t, ReplayDuplicate, c.KVReplayed(replayed(msgs[2], at)), "applied live")
	require.Equal(t, "applied", c.KVReplayed(replayed(msgs[3], at)))
	require.Equal(t, ReplayDuplicate, c.KVReplayed(replayed(msgs[3], at)), "applied by this replay")
	require.Equal(t, ReplayUnexpected, c.KVReplayed(replayed(msgs[5], at)), "held live, beyond the range")
	require.Equal(t, ReplayUnexpected, c.KVReplayed(&events.KVReplayMessage{At: at, Namespace: "dynamo", PublisherID: replayPub,
		Frames: [][]byte{{1}}}), "no sequence")
	other := storeBlock(at, replayPub+1, 4, replayWorker, 0, 2, 104)
	require.Equal(t, ReplayUnexpected, c.KVReplayed(&events.KVReplayMessage{At: at, Namespace: "dynamo", PublisherID: replayPub,
		Frames: other.Frames}), "another publisher's frames")
	require.Equal(t, "applied", c.KVReplayed(replayed(msgs[4], at)))
	c.KVReplayEnd(end(at, ""))
	require.Equal(t, map[string]uint64{ReplayRequested: 1, ReplayRecovered: 2, ReplayDuplicate: 2, ReplayUnexpected: 4},
		c.KVReplayCounts())
	require.Equal(t, reference(t, msgs[:6]), c.kv.Stats())
}

// A failed replay loses its range and is counted; its held messages are
// released, and a gap among them is lost at once rather than asked for
// again.
func TestKVReplayFailed(t *testing.T) {
	c, port, wanted := replayCore(t, replayOn, true)
	msgs := stream(8)
	c.KVMessage(msgs[1])
	c.KVMessage(msgs[3])
	c.KVMessage(msgs[5]) // a further gap while recovering: held
	c.KVReplayEnd(end(replayT0.Add(time.Second), "connection refused"+strings.Repeat(" and more", 100)))
	require.Len(t, *wanted, 1)
	require.Equal(t, map[string]uint64{ReplayRequested: 1, ReplayFailed: 1, ReplayLost: 2}, c.KVReplayCounts())
	f := finished(port)[0]
	require.Equal(t, FinishedFailed, f.Reason)
	require.Len(t, f.Err, maxReplayErr, "the error text is bounded")
	require.True(t, strings.HasPrefix(f.Err, "connection refused"))
}

// A gap that opens while a replay is in flight is asked for when that
// replay ends as asked, with the messages after it still held.
func TestKVReplayNextGap(t *testing.T) {
	c, _, wanted := replayCore(t, replayOn, true)
	msgs := stream(8)
	c.KVMessage(msgs[1])
	c.KVMessage(msgs[3])
	c.KVMessage(msgs[4])
	c.KVMessage(msgs[6])
	at := replayT0.Add(time.Second)
	c.KVReplayed(replayed(msgs[2], at))
	c.KVReplayEnd(end(at, ""))
	require.Len(t, *wanted, 2)
	require.Equal(t, uint64(5), (*wanted)[1].From)
	require.Equal(t, uint64(5), (*wanted)[1].To)
	require.Equal(t, KVHeld, c.KVMessage(msgs[7]))
	c.KVReplayed(replayed(msgs[5], at))
	c.KVReplayEnd(end(at, ""))
	c.KVMessage(msgs[8])
	require.Equal(t, reference(t, msgs), c.kv.Stats())
	require.Equal(t, map[string]uint64{ReplayRequested: 2, ReplayRecovered: 2}, c.KVReplayCounts())
}

// Without replay (the publisher does not offer it, or recovery is off) a
// gap clears the rank at once, exactly as before.
func TestKVReplayOff(t *testing.T) {
	for name, tc := range map[string]struct {
		s      KVReplaySettings
		replay bool
	}{"not offered": {replayOn, false}, "switched off": {KVReplaySettings{}, true}} {
		t.Run(name, func(t *testing.T) {
			c, port, wanted := replayCore(t, tc.s, tc.replay)
			msgs := stream(5)
			c.KVMessage(msgs[1])
			c.KVMessage(msgs[2])
			require.Equal(t, "gap", c.KVMessage(msgs[5]), "rank 1 missed 3")
			require.Empty(t, *wanted)
			require.Empty(t, c.KVReplayCounts())
			require.Empty(t, finished(port))
		})
	}
}

// Switching recovery off releases what is held; unsubscribing drops it
// with the publisher's ranks; a restarted subscription releases it and
// starts numbering anew.
func TestKVReplaySubscriptionEnds(t *testing.T) {
	at := replayT0.Add(time.Second)
	t.Run("unsubscribed", func(t *testing.T) {
		c, port, _ := replayCore(t, replayOn, true)
		msgs := stream(4)
		c.KVMessage(msgs[1])
		c.KVMessage(msgs[3])
		c.KVUnsubscribed(events.KVUnsubscribed{At: at, Namespace: "dynamo", PublisherID: replayPub})
		require.Equal(t, FinishedDropped, finished(port)[0].Reason)
		require.Zero(t, blocksOf(c.kv, replayWorker))
		require.Equal(t, uint64(1), c.KVReplayCounts()[ReplayLost])
		require.Equal(t, ReplayUnexpected, c.KVReplayed(replayed(msgs[2], at)), "the recovery is gone")
	})
	t.Run("publisher lost", func(t *testing.T) {
		c, port, wanted := replayCore(t, replayOn, true)
		msgs := stream(4)
		c.KVMessage(msgs[1])
		c.KVMessage(msgs[3])
		c.KVPublisherLost(events.KVPublisherLost{At: at, Namespace: "dynamo", PublisherID: replayPub})
		require.Equal(t, FinishedDropped, finished(port)[0].Reason)
		require.Zero(t, blocksOf(c.kv, replayWorker))
		// The publisher may come back numbering from 1: no gap.
		require.Equal(t, "applied", c.KVMessage(storeBlock(at, replayPub, 1, replayWorker, 0, 1, 500)))
		require.Len(t, *wanted, 1)
	})
	t.Run("switched off", func(t *testing.T) {
		c, port, _ := replayCore(t, replayOn, true)
		msgs := stream(4)
		c.KVMessage(msgs[1])
		c.KVMessage(msgs[3])
		c.KVMessage(msgs[4])
		require.NoError(t, c.Configure(ConfigChanged{At: at, Settings: Settings{Picker: picker.NameKV}}))
		require.Equal(t, FinishedDisabled, finished(port)[0].Reason)
		require.Equal(t, 3, blocksOf(c.kv, replayWorker), "1, 3, 4: the lost message was the first of rank 0")
	})
	t.Run("resubscribed", func(t *testing.T) {
		c, port, _ := replayCore(t, replayOn, true)
		msgs := stream(4)
		c.KVMessage(msgs[1])
		c.KVMessage(msgs[3])
		c.KVSubscribed(events.KVSubscribed{At: at, Namespace: "dynamo", PublisherID: replayPub, Replay: true})
		require.Equal(t, FinishedResubscribed, finished(port)[0].Reason)
		require.Equal(t, 1, finished(port)[0].Held)
		require.Equal(t, "applied", c.KVMessage(msgs[4]))
	})
}

// vLLM engines number batches: the same recovery works on their
// three-frame messages.
func TestKVReplayVLLM(t *testing.T) {
	port := &outputs{}
	c, err := New(Options{Picker: picker.NameKV, Port: port, KVReplay: replayOn})
	require.NoError(t, err)
	c.kv.SetLive(&discovery.Snapshot{View: discovery.View{Workers: []*discovery.Worker{{Namespace: "ns", InstanceID: 7}}}})
	c.KVSubscribed(events.KVSubscribed{At: replayT0, Namespace: "ns", PublisherID: 7, Replay: true})
	batch := func(seq uint64) *events.KVMessage {
		toks := make([]uint32, 16)
		for i := range toks {
			toks[i] = uint32(seq*100) + uint32(i)
		}
		b, err := msgpack.Marshal([]any{0.5, []any{[]any{"BlockStored", []any{seq}, nil, toks, 16, nil, "GPU"}}, nil})
		require.NoError(t, err)
		return &events.KVMessage{At: replayT0, Namespace: "ns", PublisherID: 7,
			Frames: [][]byte{[]byte("kv"), binary.BigEndian.AppendUint64(nil, seq), b}}
	}
	require.Equal(t, "applied", c.KVMessage(batch(1)))
	require.Equal(t, KVHeld, c.KVMessage(batch(3)))
	m := batch(2)
	require.Equal(t, "applied", c.KVReplayed(&events.KVReplayMessage{At: replayT0, Namespace: "ns", PublisherID: 7, Frames: m.Frames}))
	c.KVReplayEnd(events.KVReplayEnd{At: replayT0, Namespace: "ns", PublisherID: 7})
	require.Zero(t, c.KVResults()["gap"])
	require.Equal(t, 3, blocksOf(c.kv, 7))
}

// A recording keeps what the tracker applied, when it applied it: a core
// without recovery fed the recorded kv-events rows holds the same index.
func TestKVReplayRecordingReplays(t *testing.T) {
	c, port, _ := replayCore(t, KVReplaySettings{Enabled: true, Timeout: time.Second}, true)
	msgs := stream(20)
	at := replayT0.Add(time.Second)
	for _, i := range []int{1, 2, 5, 6, 9, 10, 11} {
		c.KVMessage(msgs[i])
	}
	c.KVReplayed(replayed(msgs[4], at)) // 3 is gone: partial
	c.KVReplayEnd(end(at, ""))          // 7..8 asked next
	c.KVReplayed(replayed(msgs[7], at))
	c.Tick(events.Tick{At: at.Add(2 * time.Second)}) // 8 times out
	for _, i := range []int{12, 15, 16} {
		c.KVMessage(msgs[i])
	}
	c.KVUnsubscribed(events.KVUnsubscribed{At: at.Add(3 * time.Second), Namespace: "dynamo", PublisherID: replayPub})

	r, _, _ := replayCore(t, KVReplaySettings{}, false)
	var applied, replayedRows int
	var stats kv.Stats
	for _, out := range port.got {
		switch v := out.(type) {
		case KVApplied:
			if v.Frames == nil {
				continue
			}
			applied++
			if v.Replayed {
				replayedRows++
			}
			require.Equal(t, v.Result, r.KVMessage(&events.KVMessage{At: v.At, Namespace: v.Namespace, PublisherID: v.PublisherID, Frames: v.Frames}))
		case events.KVUnsubscribed:
			stats = r.kv.Stats()
			r.KVUnsubscribed(v)
		}
	}
	require.Equal(t, 2, replayedRows)
	require.Equal(t, 10, applied, "1, 2, 4r, 5, 6, 7r, 9, 10, 11, 12; 15 and 16 dropped with the subscription")
	require.NotEmpty(t, stats.Ranks)
	require.Equal(t, c.kv.Stats(), r.kv.Stats())
	require.Equal(t, c.KVResults(), r.KVResults())
}

// FuzzKVReplay drives the recovery with hostile frames in every role
// (live, replayed, ends and ticks): it never panics and never holds more
// than its bounds.
func FuzzKVReplay(f *testing.F) {
	msgs := stream(6)
	f.Add(msgs[1].Frames[2], msgs[3].Frames[3], []byte{0, 1, 2, 3, 4, 5})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 9}, []byte{}, []byte{1, 1, 0, 2, 3})
	f.Fuzz(func(t *testing.T, seq, payload, ops []byte) {
		c, _, _ := replayCore(t, KVReplaySettings{Enabled: true, MaxHeldMessages: 4, Timeout: time.Second}, true)
		pub := binary.BigEndian.AppendUint64(nil, replayPub)
		now := replayT0
		for i, op := range ops {
			now = now.Add(300 * time.Millisecond)
			s := binary.BigEndian.AppendUint64(nil, uint64(i)*uint64(op%5))
			if len(seq) == 8 && op&8 != 0 {
				s = seq
			}
			frames := [][]byte{[]byte("kv-events"), pub, s, payload}
			if op&16 != 0 {
				frames = [][]byte{[]byte("kv"), s, payload}
			}
			switch op % 4 {
			case 0:
				c.KVMessage(&events.KVMessage{At: now, Namespace: "dynamo", PublisherID: replayPub, Frames: frames})
			case 1:
				c.KVReplayed(&events.KVReplayMessage{At: now, Namespace: "dynamo", PublisherID: replayPub, Frames: frames})
			case 2:
				c.KVReplayEnd(end(now, string(payload[:min(len(payload), 8)])))
			case 3:
				c.Tick(events.Tick{At: now})
			}
			if st := c.streams[publisherKey{"dynamo", replayPub}]; st != nil && st.rec != nil {
				require.LessOrEqual(t, len(st.rec.held), 4)
				require.LessOrEqual(t, st.rec.bytes, KVReplayMaxHeldBytes)
			}
		}
	})
}

// Model test: whatever a lossy network drops, a publisher that can
// replay everything leaves the core with the index of a lossless run,
// no gap seen by the tracker, and as many messages recovered as lost.
func TestKVReplayModel(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 1))
		c, _, wanted := replayCore(t, replayOn, true)
		msgs := stream(200)
		var dropped uint64
		now := replayT0
		for i := 1; i < len(msgs); i++ {
			now = now.Add(time.Millisecond)
			// The first and last messages always arrive: the first
			// starts the stream's numbering, the last shows every loss.
			if i > 1 && i < len(msgs)-1 && rng.Float64() < 0.1 {
				dropped++
				continue
			}
			c.KVMessage(msgs[i])
			// The host answers some replays at once, others after more
			// live traffic.
			for len(*wanted) > 0 && rng.Float64() < 0.5 {
				w := (*wanted)[0]
				*wanted = (*wanted)[1:]
				for s := w.From; s <= w.To; s++ {
					c.KVReplayed(replayed(msgs[s], now))
				}
				c.KVReplayEnd(end(now, ""))
			}
		}
		for len(*wanted) > 0 {
			w := (*wanted)[0]
			*wanted = (*wanted)[1:]
			for s := w.From; s <= w.To; s++ {
				c.KVReplayed(replayed(msgs[s], now))
			}
			c.KVReplayEnd(end(now, ""))
		}
		require.Equal(t, reference(t, msgs), c.kv.Stats(), "seed %d", seed)
		require.Zero(t, c.KVResults()["gap"], "seed %d", seed)
		require.Equal(t, dropped, c.KVReplayCounts()[ReplayRecovered], "seed %d", seed)
		require.Zero(t, c.KVReplayCounts()[ReplayLost], "seed %d", seed)
	}
}

// The live host's serialised entry points carry a recovery end to end.
func TestKVReplayThroughShared(t *testing.T) {
	var wanted []events.KVReplayWanted
	c, err := New(Options{Picker: picker.NameKV, KVReplay: replayOn,
		Hooks: Hooks{KVReplayWanted: func(w events.KVReplayWanted) { wanted = append(wanted, w) }}})
	require.NoError(t, err)
	c.kv.SetLive(&discovery.Snapshot{View: discovery.View{Workers: []*discovery.Worker{
		{Namespace: "dynamo", InstanceID: replayWorker, Runtime: discovery.RuntimeConfig{DPSize: 2}},
	}}})
	s := NewShared(c, nil)
	s.KVSubscribedReplay("dynamo", replayPub, true, replayT0)
	msgs := stream(4)
	kvIn := func(m *events.KVMessage) string { return s.KVMessage(m.Namespace, m.PublisherID, m.Frames, m.At) }
	require.Equal(t, "applied", kvIn(msgs[1]))
	require.Equal(t, KVHeld, kvIn(msgs[3]))
	require.Len(t, wanted, 1)
	require.Equal(t, "applied", s.KVReplayed("dynamo", replayPub, msgs[2].Frames, replayT0))
	s.KVReplayEnd("dynamo", replayPub, "", replayT0)
	require.Equal(t, "applied", kvIn(msgs[4]))
	require.Equal(t, reference(t, msgs), c.kv.Stats())
}
