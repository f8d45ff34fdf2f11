package publish

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/engine"
	"switchyard/internal/pypeer"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/eventplane/replay"
	"switchyard/router/eventplane/zmtp"
)

// replayingKV is a kv-events publisher that serves replay with a buffer of
// n, subscribed by the router's own client so that what is sent is seen.
func replayingKV(t *testing.T, n int) (*Publisher, *KVReporter, *zmtp.Sub) {
	t.Helper()
	p, err := New(KVEventsTopic)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	require.NoError(t, p.ServeReplay(n))
	require.ErrorIs(t, p.ServeReplay(n), ErrReplayServed)
	require.True(t, strings.HasPrefix(p.ReplayEndpoint(), "tcp://127.0.0.1:"))
	r, err := NewKVReporter(p, 7)
	require.NoError(t, err)
	return p, r, subscribe(t, p)
}

func removed(id uint64) []engine.KVEvent {
	return []engine.KVEvent{{EventID: id, Kind: engine.Removed, Removed: []uint64{id * 10}}}
}

func liveSeq(t *testing.T, sub *zmtp.Sub) uint64 {
	t.Helper()
	frames, err := sub.ReadMessage()
	require.NoError(t, err)
	var m envelope.Message
	require.Equal(t, envelope.Applied, envelope.NewDecoder(KVEventsTopic, 1<<20).Decode(frames, &m))
	return m.Sequence
}

func fetcher() *replay.Fetcher {
	return &replay.Fetcher{Dialer: &eventplane.Dialer{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		Limits: replay.DefaultLimits, Counts: &replay.Counts{}}
}

type replayed struct{ seq uint64 }

func fetchAll(t *testing.T, p *Publisher, from uint64) ([]replayed, replay.Result) {
	t.Helper()
	var got []replayed
	res, err := fetcher().Fetch(context.Background(), p.ReplayEndpoint(), from, func(seq uint64, payload [][]byte) error {
		msg, err := replay.DynamoMessage(seq, payload)
		if err != nil {
			return err
		}
		var m envelope.Message
		if r := envelope.NewDecoder(KVEventsTopic, 1<<20).Decode(msg, &m); r != envelope.Applied {
			return fmt.Errorf("replayed seq %d decodes as %v", seq, r)
		}
		if m.Sequence != seq || m.PublisherID != p.ID() {
			return fmt.Errorf("replayed seq %d names publisher %x seq %d", seq, m.PublisherID, m.Sequence)
		}
		got = append(got, replayed{seq})
		return nil
	})
	require.NoError(t, err)
	require.True(t, res.Ended)
	return got, res
}

// Dropped messages are lost on the way but kept, so a replay brings them
// back; a skipped sequence never existed and stays lost; the buffer keeps
// only the last n.
func TestReplayRecoversDroppedButNotSkipped(t *testing.T) {
	p, r, sub := replayingKV(t, 6)
	require.NoError(t, r.Report(0, removed(1))) // seq 1
	require.Equal(t, uint64(1), liveSeq(t, sub))
	p.DropNext(2)
	require.NoError(t, r.Report(0, removed(2))) // seq 2, dropped
	require.NoError(t, r.Report(0, removed(3))) // seq 3, dropped
	require.NoError(t, r.Report(0, removed(4))) // seq 4
	require.Equal(t, uint64(4), liveSeq(t, sub), "dropped messages reached the subscriber")
	p.SkipSequence()                            // seq 5 never exists
	require.NoError(t, r.Report(0, removed(6))) // seq 6
	require.Equal(t, uint64(6), liveSeq(t, sub))

	got, res := fetchAll(t, p, 2)
	require.Equal(t, replay.Result{First: 2, Last: 6, Batches: 4, Ended: true}, res)
	require.Equal(t, []uint64{2, 3, 4, 6}, seqs(got))

	// Two more push seq 1 out of a buffer of 6 (the skipped 5 takes no room).
	require.NoError(t, r.Report(0, append(removed(7), removed(8)...))) // seq 7, 8
	got, res = fetchAll(t, p, 1)
	require.Equal(t, []uint64{2, 3, 4, 6, 7, 8}, seqs(got))
	require.Equal(t, uint64(2), res.First, "the buffer no longer holds 1")
}

func seqs(r []replayed) []uint64 {
	out := make([]uint64, len(r))
	for i, x := range r {
		out[i] = x.seq
	}
	return out
}

// A restarted publisher is a new process: a new replay socket with an
// empty buffer.
func TestReplayRestartsEmpty(t *testing.T) {
	p, r, _ := replayingKV(t, 10)
	require.NoError(t, r.Report(0, removed(1)))
	before := p.ReplayEndpoint()
	require.NoError(t, p.Restart())
	require.NotEqual(t, before, p.ReplayEndpoint())
	got, res := fetchAll(t, p, 0)
	require.Empty(t, got)
	require.Equal(t, replay.Result{Ended: true}, res)
	conn, err := net.Dial("tcp", strings.TrimPrefix(before, "tcp://"))
	if err == nil {
		conn.Close()
		t.Fatal("the old replay socket still accepts connections")
	}
}

// libzmq's DEALER (python3-zmq) asks the fake fleet's ROUTER, as a vLLM
// subscriber would ask vLLM: the replies carry the original frames.
func TestReplayServesALibzmqDealer(t *testing.T) {
	p, r, sub := replayingKV(t, 100)
	var sent [][][]byte
	for id := uint64(1); id <= 5; id++ {
		require.NoError(t, r.Report(0, removed(id)))
		frames, err := sub.ReadMessage()
		require.NoError(t, err)
		cp := make([][]byte, len(frames))
		for i, f := range frames {
			cp[i] = append([]byte(nil), f...)
		}
		sent = append(sent, cp)
	}
	peer := pypeer.Start(t, "testdata/replay_dealer.py", p.ReplayEndpoint(), "3")
	for seq := uint64(3); seq <= 5; seq++ {
		h := sha256.New()
		for _, f := range sent[seq-1] {
			h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(f))))
			h.Write(f)
		}
		require.Equal(t, fmt.Sprintf("%d 4 %s", seq, hex.EncodeToString(h.Sum(nil))), peer.Expect(t, "reply "))
	}
	peer.Expect(t, "end")
}

func TestReplayIgnoresMalformedRequests(t *testing.T) {
	p, r, _ := replayingKV(t, 10)
	require.NoError(t, r.Report(0, removed(1)))
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.ReplayEndpoint(), "tcp://"))
	require.NoError(t, err)
	defer conn.Close()
	d, err := zmtp.HandshakeDealer(conn, envelope.KVEventLimits)
	require.NoError(t, err)
	require.NoError(t, d.Send([]byte("not empty"), make([]byte, 8)))
	require.NoError(t, d.Send([]byte{}, []byte{1, 2, 3}))
	require.NoError(t, d.Send([]byte{}, make([]byte, 8))) // a good one after them
	msg, err := d.ReadMessage()
	require.NoError(t, err)
	require.Len(t, msg, 6)
	require.Equal(t, uint64(1), binary.BigEndian.Uint64(msg[1]))
}
