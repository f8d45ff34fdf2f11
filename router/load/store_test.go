package load

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/wire"
	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/events"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const pid = 2046539

func liveSnapshot(workers ...*discovery.Worker) *discovery.Snapshot {
	return &discovery.Snapshot{View: discovery.View{Workers: workers,
		Publishers: []*discovery.Publisher{{Namespace: "dynamo", PublisherID: pid, Topic: discovery.TopicLoad}}}}
}

func decodeWorker(id uint64, start, size uint32) *discovery.Worker {
	return &discovery.Worker{Namespace: "dynamo", InstanceID: id, Role: discovery.RoleDecode,
		Runtime: discovery.RuntimeConfig{DPStartRank: start, DPSize: size}}
}

type counts map[envelope.Result]int

func newStore(t *testing.T) (*Store, counts) {
	c := counts{}
	s := NewStore(func(r envelope.Result) { c[r]++ })
	s.SetLive(liveSnapshot(decodeWorker(7, 0, 2)))
	return s, c
}

func msg(at time.Time, frames [][]byte) *events.LoadMessage {
	return &events.LoadMessage{At: at, Namespace: "dynamo", PublisherID: pid, Frames: frames}
}

func sample(seq uint64, rank uint32, kv uint64) [][]byte {
	return wire.LoadMessage(pid, seq, wire.ActiveLoad{WorkerID: 7, DPRank: rank, KVUsedBlocks: wire.U64(kv)}, t0)
}

func key(rank uint32) Key { return Key{"dynamo", 7, rank} }

func TestApplyNamedAndPositionalActiveLoad(t *testing.T) {
	s, _ := newStore(t)
	require.Equal(t, envelope.Applied, s.Apply(msg(t0, wire.LoadMessage(pid, 1, wire.ActiveLoad{
		WorkerID: 7, DPRank: 1, ActiveDecodeBlocks: wire.U64(12), ActivePrefillTokens: wire.U64(300)}, t0))))
	got, ok := s.Latest(key(1))
	require.True(t, ok)
	require.True(t, got.HasDecodeBlocks && got.HasPrefillTokens)
	require.False(t, got.HasKVUsedBlocks, "nil fields stay absent")
	require.Equal(t, uint64(12), got.ActiveDecodeBlocks)
	require.Equal(t, t0, got.ReceivedAt)

	// Positional ActiveLoad inside a positional envelope (rmp-serde to_vec).
	payload := wire.Marshal(&wire.ActiveLoad{WorkerID: 7, DPRank: 0, KVUsedBlocks: wire.U64(5)}, true)
	env := wire.Marshal(&wire.Envelope{Topic: "kv_metrics", PublisherID: pid, Sequence: 2, Payload: payload}, true)
	frames := wire.Message("kv_metrics", pid, 2, nil, t0)
	frames[3] = wire.Frame(env)
	require.Equal(t, envelope.Applied, s.Apply(msg(t0, frames)))
	got, _ = s.Latest(key(0))
	require.Equal(t, uint64(5), got.KVUsedBlocks)

	// An envelope with an extra published_at_ns key (newer publishers).
	type newer struct {
		wire.Envelope
		PublishedAtNs uint64 `msgpack:"published_at_ns"`
	}
	pl := wire.Marshal(&wire.ActiveLoad{WorkerID: 7, KVUsedBlocks: wire.U64(6)}, false)
	frames = wire.Message("kv_metrics", pid, 3, nil, t0)
	frames[3] = wire.Frame(wire.Marshal(&newer{wire.Envelope{Topic: "kv_metrics", PublisherID: pid, Sequence: 3, Payload: pl}, 1}, false))
	require.Equal(t, envelope.Applied, s.Apply(msg(t0, frames)))
}

func TestDropsAreCountedByResult(t *testing.T) {
	good := func(seq uint64) [][]byte { return sample(seq, 0, 1) }
	withFrame := func(f func([][]byte) [][]byte) [][]byte { return f(good(1)) }
	oversized := func(fr [][]byte) [][]byte {
		h := make([]byte, 5)
		h[0] = 1
		binary.BigEndian.PutUint32(h[1:], MaxPayloadBytes+1)
		fr[3] = h // declared size alone is refused: the bytes need not exist
		return fr
	}
	cases := []struct {
		name   string
		frames [][]byte
		msgPID uint64
		want   envelope.Result
	}{
		{"three frames", good(1)[:3], pid, envelope.Malformed},
		{"short publisher frame", withFrame(func(f [][]byte) [][]byte { f[1] = f[1][:7]; return f }), pid, envelope.Malformed},
		{"garbage envelope", withFrame(func(f [][]byte) [][]byte { f[3] = wire.Frame([]byte{0xc1, 0x00}); return f }), pid, envelope.Malformed},
		{"truncated frame", withFrame(func(f [][]byte) [][]byte { f[3] = f[3][:len(f[3])-1]; return f }), pid, envelope.Malformed},
		{"version 2", withFrame(func(f [][]byte) [][]byte { f[3][0] = 2; return f }), pid, envelope.UnknownVersion},
		{"topic frame", withFrame(func(f [][]byte) [][]byte { f[0] = []byte("kv-events"); return f }), pid, envelope.TopicMismatch},
		{"envelope topic", wire.Message("kv_metrics", pid, 1, nil, t0), pid, envelope.Malformed},
		{"oversized", withFrame(oversized), pid, envelope.Oversized},
		{"frame vs envelope publisher", withFrame(func(f [][]byte) [][]byte { binary.BigEndian.PutUint64(f[1], 99); return f }), 99, envelope.IdentityMismatch},
		{"not the discovered publisher", good(1), 99, envelope.IdentityMismatch},
		{"worker not live", wire.LoadMessage(pid, 1, wire.ActiveLoad{WorkerID: 8}, t0), pid, envelope.IdentityMismatch},
		{"rank not declared", wire.LoadMessage(pid, 1, wire.ActiveLoad{WorkerID: 7, DPRank: 2}, t0), pid, envelope.IdentityMismatch},
		{"no worker_id", wire.Message("kv_metrics", pid, 1, wire.Marshal(map[string]any{"dp_rank": 0}, false), t0), pid, envelope.Malformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, cnt := newStore(t)
			ev := msg(t0, c.frames)
			ev.PublisherID = c.msgPID
			require.Equal(t, c.want, s.Apply(ev))
			require.Equal(t, 1, cnt[c.want])
			require.Zero(t, s.Len())
		})
	}
	// An envelope whose topic differs from frame 0.
	s, _ := newStore(t)
	fr := good(1)
	fr[3] = wire.Frame(wire.Marshal(&wire.Envelope{Topic: "kv-events", PublisherID: pid, Sequence: 1,
		Payload: wire.Marshal(&wire.ActiveLoad{WorkerID: 7}, false)}, false))
	require.Equal(t, envelope.TopicMismatch, s.Apply(msg(t0, fr)))
}

func TestSequenceDedupGapsAndRestarts(t *testing.T) {
	s, cnt := newStore(t)
	require.Equal(t, envelope.Applied, s.Apply(msg(t0, sample(1, 0, 10))))
	require.Equal(t, envelope.Applied, s.Apply(msg(t0, sample(2, 1, 20))))
	require.Equal(t, envelope.Duplicate, s.Apply(msg(t0, sample(2, 1, 99))), "replay on the stream")
	require.Equal(t, envelope.Duplicate, s.Apply(msg(t0, sample(1, 0, 99))))
	require.Equal(t, 2, cnt[envelope.Duplicate])

	// A gap (3 missing): everything held from the publisher is dropped,
	// then the new sample applies.
	require.Equal(t, envelope.Applied, s.Apply(msg(t0, sample(4, 0, 11))))
	_, ok := s.Latest(key(1))
	require.False(t, ok, "rank 1's sample may be stale after a gap")
	got, _ := s.Latest(key(0))
	require.Equal(t, uint64(11), got.KVUsedBlocks)

	// Reconnect: the stream starts afresh and held samples are dropped.
	s.Connected(events.LoadConnected{At: t0, Namespace: "dynamo", PublisherID: pid})
	require.Zero(t, s.Len())
	require.Equal(t, envelope.Applied, s.Apply(msg(t0, sample(1, 0, 12))), "sequence 1 again on a new stream")

	// Per key: after a reconnect that did not drop (another publisher's
	// samples), an older sequence from the same publisher is a replay...
	s.Connected(events.LoadConnected{At: t0, Namespace: "dynamo", PublisherID: 1})
	// ...and a restarted publisher (new id) replaces regardless of sequence.
	s.SetLive(&discovery.Snapshot{View: discovery.View{Workers: []*discovery.Worker{decodeWorker(7, 0, 2)},
		Publishers: []*discovery.Publisher{{Namespace: "dynamo", PublisherID: 4242, Topic: discovery.TopicLoad}}}})
	restarted := wire.LoadMessage(4242, 0, wire.ActiveLoad{WorkerID: 7, KVUsedBlocks: wire.U64(3)}, t0)
	ev := msg(t0, restarted)
	ev.PublisherID = 4242
	require.Equal(t, envelope.Applied, s.Apply(ev))
	got, _ = s.Latest(key(0))
	require.Equal(t, uint64(4242), got.PublisherID)
	require.Equal(t, uint64(3), got.KVUsedBlocks)
}

func TestSetLiveEvictsDepartedWorkers(t *testing.T) {
	s, _ := newStore(t)
	s.SetLive(liveSnapshot(decodeWorker(7, 0, 2), decodeWorker(8, 0, 1)))
	s.Apply(msg(t0, sample(1, 1, 10)))
	s.Apply(msg(t0, wire.LoadMessage(pid, 2, wire.ActiveLoad{WorkerID: 8, KVUsedBlocks: wire.U64(1)}, t0)))
	require.True(t, s.RecordDispatch(Dispatch{RequestID: 1, Key: Key{"dynamo", 8, 0}, Blocks: 4, At: t0}))
	require.Equal(t, 2, s.Len())
	// Worker 8 leaves; worker 7 shrinks to one rank.
	s.SetLive(liveSnapshot(decodeWorker(7, 0, 1)))
	require.Zero(t, s.Len())
	_, blocks := s.Unanswered(Key{"dynamo", 8, 0}, t0)
	require.Zero(t, blocks)
}

func TestOverCapacity(t *testing.T) {
	s, cnt := newStore(t)
	s.SetLive(liveSnapshot(decodeWorker(7, 0, MaxEntries+1)))
	for i := uint32(0); i < MaxEntries; i++ {
		require.Equal(t, envelope.Applied, s.Apply(msg(t0, sample(uint64(i)+1, i, 1))))
	}
	require.Equal(t, envelope.OverCapacity, s.Apply(msg(t0, sample(MaxEntries+1, MaxEntries, 1))))
	require.Equal(t, envelope.Applied, s.Apply(msg(t0, sample(MaxEntries+2, 0, 2))), "existing ranks still update")
	require.Equal(t, 1, cnt[envelope.OverCapacity])
}

func TestStatusUnderTheBestEffortContract(t *testing.T) {
	s, _ := newStore(t)
	now := t0
	require.Equal(t, Status{Kind: Quiet}, s.StatusOf(key(0), Decode, now), "never published")

	s.Apply(msg(now, sample(1, 0, 40)))
	require.Equal(t, Status{Kind: Fresh, Backlog: 40}, s.StatusOf(key(0), Decode, now.Add(3*time.Second)))
	require.Equal(t, Status{Kind: SilentUnderLoad}, s.StatusOf(key(0), Decode, now.Add(3*time.Second+1)))
	require.Equal(t, Status{Kind: Undefined}, s.StatusOf(key(0), Prefill, now), "dynamo.vllm publishes no prefill tokens")
	require.True(t, s.AnyFresh([]Key{key(1), key(0)}, Decode, now))
	require.False(t, s.AnyFresh([]Key{key(1), key(0)}, Prefill, now))

	// max_staleness is hot.
	s.SetMaxStaleness(10 * time.Second)
	require.Equal(t, Fresh, s.StatusOf(key(0), Decode, now.Add(9*time.Second)).Kind)

	// The last sample said idle: quiet once stale, not silent.
	s.Apply(msg(now, sample(2, 0, 0)))
	require.Equal(t, Status{Kind: Quiet}, s.StatusOf(key(0), Decode, now.Add(time.Minute)))
	require.False(t, s.AnyFresh([]Key{key(0)}, Decode, now.Add(time.Minute)))

	// active_decode_blocks wins over kv_used_blocks when both are present.
	s.Apply(msg(now, wire.LoadMessage(pid, 3, wire.ActiveLoad{WorkerID: 7, ActiveDecodeBlocks: wire.U64(3), KVUsedBlocks: wire.U64(50)}, now)))
	require.Equal(t, Status{Kind: Fresh, Backlog: 3}, s.StatusOf(key(0), Decode, now))
	_, ok := s.Fresh(key(0), time.Second, now.Add(2*time.Second))
	require.False(t, ok)
	_, ok = s.FreshDefault(key(0), now.Add(2*time.Second))
	require.True(t, ok)
}

func TestUnansweredDispatchesAndStalls(t *testing.T) {
	s, _ := newStore(t)
	k := key(0)
	require.True(t, s.RecordDispatch(Dispatch{RequestID: 1, Key: k, Phase: Prefill, PromptTokens: 500, Blocks: 1, At: t0}))
	require.True(t, s.RecordDispatch(Dispatch{RequestID: 2, Key: k, Phase: Prefill, PromptTokens: 700, Blocks: 3, At: t0.Add(time.Second)}))
	tokens, blocks := s.Unanswered(k, t0.Add(2*time.Second))
	require.Equal(t, uint64(1200), tokens)
	require.Equal(t, uint64(4), blocks)

	require.False(t, s.Stalled(k, t0.Add(5*time.Second)), "request 2 is only 4 s old; request 1 has 1 block")
	require.True(t, s.Stalled(k, t0.Add(6*time.Second)))
	s.EndDispatch(2, k)
	require.False(t, s.Stalled(k, t0.Add(6*time.Second)), "an ended request may never have reached the engine")

	// The decode half of a pair cannot stall its rank.
	require.True(t, s.RecordDispatch(Dispatch{RequestID: 3, Key: k, Phase: Decode, Blocks: 8, PairedDecode: true, At: t0}))
	require.False(t, s.Stalled(k, t0.Add(10*time.Second)))
	require.True(t, s.RecordDispatch(Dispatch{RequestID: 4, Key: k, Phase: Decode, Blocks: 8, At: t0.Add(10 * time.Second)}))
	require.True(t, s.Stalled(k, t0.Add(16*time.Second)))

	// A sample answers everything dispatched so far.
	s.Apply(msg(t0.Add(16*time.Second), sample(1, 0, 9)))
	require.False(t, s.Stalled(k, t0.Add(16*time.Second)))
	tokens, blocks = s.Unanswered(k, t0.Add(16*time.Second))
	require.Zero(t, tokens+blocks)

	// Dispatches count for at most 30 s.
	require.True(t, s.RecordDispatch(Dispatch{RequestID: 5, Key: k, Blocks: 2, At: t0.Add(20 * time.Second)}))
	_, blocks = s.Unanswered(k, t0.Add(49*time.Second))
	require.Equal(t, uint64(2), blocks)
	_, blocks = s.Unanswered(k, t0.Add(50*time.Second))
	require.Zero(t, blocks)
	require.False(t, s.Stalled(k, t0.Add(50*time.Second)), "an aged-out request no longer stalls its rank")
}

// A request served to its end leaves the backlog at once: a change-driven
// publisher whose load is back where it was sends no sample to answer it.
func TestFinishedDispatchLeavesTheBacklog(t *testing.T) {
	s, _ := newStore(t)
	k, other := key(0), key(1)
	s.Apply(msg(t0, sample(1, 0, 0)))
	require.True(t, s.RecordDispatch(Dispatch{RequestID: 1, Key: k, Phase: Decode, PromptTokens: 5808, Blocks: 363, At: t0}))
	require.True(t, s.RecordDispatch(Dispatch{RequestID: 2, Key: k, Phase: Decode, PromptTokens: 100, Blocks: 7, At: t0}))
	require.True(t, s.RecordDispatch(Dispatch{RequestID: 3, Key: k, Phase: Decode, PromptTokens: 50, Blocks: 4, At: t0}))
	s.FinishDispatch(1, k, other)
	tokens, blocks := s.Unanswered(k, t0.Add(time.Second))
	require.Equal(t, uint64(150), tokens, "the finished request no longer counts")
	require.Equal(t, uint64(11), blocks)
	s.FinishDispatch(1, k)
	tokens, _ = s.Unanswered(k, t0.Add(time.Second))
	require.Equal(t, uint64(150), tokens, "finishing twice takes nothing more")

	// An ended (cancelled) request may still run: it keeps counting.
	s.EndDispatch(2, k)
	tokens, _ = s.Unanswered(k, t0.Add(time.Second))
	require.Equal(t, uint64(150), tokens)
	require.True(t, s.Stalled(k, t0.Add(StallAfter)), "request 3 is still open")
	s.FinishDispatch(3, k)
	require.False(t, s.Stalled(k, t0.Add(StallAfter)), "a finished request cannot stall its rank")
	s.FinishDispatch(2, k)
	tokens, blocks = s.Unanswered(k, t0.Add(time.Second))
	require.Zero(t, tokens+blocks)

	// Expiry after a finish subtracts nothing twice.
	_, blocks = s.Unanswered(k, t0.Add(DispatchTTL+time.Second))
	require.Zero(t, blocks)
}

func TestDispatchBounds(t *testing.T) {
	s, _ := newStore(t)
	for i := 0; i < MaxDispatchesPerRank; i++ {
		require.True(t, s.RecordDispatch(Dispatch{RequestID: uint64(i), Key: key(0), Blocks: 1, At: t0}))
	}
	require.False(t, s.RecordDispatch(Dispatch{RequestID: 1 << 20, Key: key(0), At: t0}))
	require.True(t, s.RecordDispatch(Dispatch{RequestID: 1 << 20, Key: key(0), At: t0.Add(DispatchTTL)}), "expired records make room")
}

// A rank whose publisher stays quiet while it serves requests one after
// another keeps a finished record per request until its next sample:
// those records give way, so dispatches past the per-rank bound are still
// counted, and the backlog is that of the requests still running.
func TestFinishedRecordsMakeRoom(t *testing.T) {
	s, _ := newStore(t)
	k := key(0)
	at := t0
	const served = 3 * MaxDispatchesPerRank
	for i := range served {
		at = at.Add(time.Millisecond)
		require.True(t, s.RecordDispatch(Dispatch{RequestID: uint64(i), Key: k, Blocks: 2, PromptTokens: 10, At: at}), "dispatch %d", i)
		if i%10 != 0 { // every tenth request is still running
			s.FinishDispatch(uint64(i), k)
		}
	}
	running := uint64(served+9) / 10
	tokens, blocks := s.Unanswered(k, at)
	require.Equal(t, 10*running, tokens)
	require.Equal(t, 2*running, blocks)
	require.LessOrEqual(t, s.ranks.total, MaxDispatchesPerRank)
	r := s.ranks.lookup(k)
	require.Equal(t, len(r.live())-r.finished, len(r.records), "a count per live unfinished record, none for the finished")
	require.Less(t, r.finished, len(r.live()))

	// Unfinished records still fill the rank and are refused past the bound.
	s2, _ := newStore(t)
	for i := range MaxDispatchesPerRank {
		require.True(t, s2.RecordDispatch(Dispatch{RequestID: uint64(i), Key: k, Blocks: 1, At: t0}))
		if i < compactAt-1 {
			s2.FinishDispatch(uint64(i), k)
		}
	}
	require.False(t, s2.RecordDispatch(Dispatch{RequestID: 1 << 20, Key: k, At: t0}), "too few finished records to compact")
	s2.FinishDispatch(compactAt-1, k)
	require.True(t, s2.RecordDispatch(Dispatch{RequestID: 1 << 20, Key: k, At: t0}), "an eighth finished: compacted")
}

func TestSteadyStateApplyAllocatesNothing(t *testing.T) {
	s, cnt := newStore(t)
	const runs = 1000
	msgs := make([]*events.LoadMessage, runs+2)
	for i := range msgs {
		msgs[i] = msg(t0, sample(uint64(i)+1, uint32(i%2), uint64(i)))
	}
	s.Apply(msgs[0])
	next := 1
	allocs := testing.AllocsPerRun(runs, func() {
		s.Apply(msgs[next])
		next++
	})
	require.Zero(t, allocs)
	require.Equal(t, runs+2, cnt[envelope.Applied], "every measured message was applied")
}

func TestSubscriberDeliverAllocatesNothing(t *testing.T) {
	s, cnt := newStore(t)
	sub := Subscriber{Store: s}
	const runs = 500
	msgs := make([][][]byte, runs+2)
	for i := range msgs {
		msgs[i] = sample(uint64(i)+1, 0, uint64(i))
	}
	sub.Connected("dynamo", pid, t0)
	sub.Deliver("dynamo", pid, msgs[0], t0)
	next := 1
	allocs := testing.AllocsPerRun(runs, func() {
		sub.Deliver("dynamo", pid, msgs[next], t0)
		next++
	})
	require.Zero(t, allocs)
	require.Equal(t, runs+2, cnt[envelope.Applied], "every measured message was applied")
}

// The best-effort contract as a table, stepped on a Manual clock: each row
// advances time, optionally applies a sample, and checks the decode status.
func TestStatusTableUnderManualClock(t *testing.T) {
	s, _ := newStore(t)
	clk := clock.NewManual(t0)
	type row struct {
		name    string
		advance time.Duration
		kvUsed  *uint64 // a sample to apply first, if set
		want    Status
	}
	seq := uint64(0)
	for _, r := range []row{
		{"never published: quiet", 0, nil, Status{Kind: Quiet}},
		{"a busy sample: fresh", time.Second, wire.U64(30), Status{Kind: Fresh, Backlog: 30}},
		{"3 s later: still fresh", 3 * time.Second, nil, Status{Kind: Fresh, Backlog: 30}},
		{"past max staleness with a backlog: silent under load", time.Millisecond, nil, Status{Kind: SilentUnderLoad}},
		{"an idle sample: fresh at zero", time.Second, wire.U64(0), Status{Kind: Fresh}},
		{"an idle sample gone stale: quiet", time.Hour, nil, Status{Kind: Quiet}},
		{"busy again", 0, wire.U64(5), Status{Kind: Fresh, Backlog: 5}},
	} {
		clk.Advance(r.advance)
		if r.kvUsed != nil {
			seq++
			require.Equal(t, envelope.Applied, s.Apply(msg(clk.Now(), wire.LoadMessage(pid, seq,
				wire.ActiveLoad{WorkerID: 7, KVUsedBlocks: r.kvUsed}, clk.Now()))), r.name)
		}
		require.Equal(t, r.want, s.StatusOf(key(0), Decode, clk.Now()), r.name)
	}
}

// Installing the snapshot already installed changes nothing: samples,
// dispatches and the handles pickers hold stay, since the generation a
// picker's cached handles depend on does not move.
func TestSetLiveTwiceIsANoOp(t *testing.T) {
	s := NewStore(nil)
	snap := liveSnapshot(decodeWorker(7, 0, 2))
	s.SetLive(snap)
	require.Equal(t, envelope.Applied, s.Apply(msg(t0, sample(1, 0, 5))))
	require.True(t, s.RecordDispatch(Dispatch{RequestID: 1, Key: key(1), Blocks: 4, At: t0}))
	r := s.Reader(t0)
	gen := r.Generation()
	r.Close()

	s.SetLive(snap)
	r = s.Reader(t0)
	require.Equal(t, gen, r.Generation(), "the same snapshot does not invalidate handles")
	r.Close()
	require.Equal(t, 1, s.Len())
	_, blocks := s.Unanswered(key(1), t0)
	require.Equal(t, uint64(4), blocks)

	// An equal but distinct snapshot is a new installation.
	s.SetLive(liveSnapshot(decodeWorker(7, 0, 2)))
	r = s.Reader(t0)
	require.NotEqual(t, gen, r.Generation())
	r.Close()
	require.Equal(t, 1, s.Len(), "nothing left, so nothing was evicted")
}
