package publish

import (
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"

	"switchyard/router/envelope"
	"switchyard/router/eventplane/zmtp"
	"switchyard/router/load"
)

// subscribe connects the router's own bounded client to p.
func subscribe(t *testing.T, p *Publisher) *zmtp.Sub {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.Endpoint(), "tcp://"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	sub, err := zmtp.Handshake(conn, [][]byte{[]byte(p.Topic)}, envelope.LoadLimits)
	require.NoError(t, err)
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(p.sock.(zmq4.Topics).Topics(), p.Topic) {
		require.True(t, time.Now().Before(deadline), "subscription never reached the publisher")
		time.Sleep(2 * time.Millisecond)
	}
	return sub
}

type received struct {
	seq  uint64
	load load.ActiveLoad
}

func next(t *testing.T, sub *zmtp.Sub) received {
	t.Helper()
	frames, err := sub.ReadMessage()
	require.NoError(t, err)
	var m envelope.Message
	require.Equal(t, envelope.Applied, envelope.NewDecoder("kv_metrics", load.MaxPayloadBytes).Decode(frames, &m))
	var a load.ActiveLoad
	require.True(t, load.DecodeActiveLoad(m.Envelope.Payload, &a))
	return received{m.Sequence, a}
}

type fakeLoad struct {
	mu sync.Mutex
	l  map[uint32]Load
}

func (f *fakeLoad) set(rank uint32, l Load) { f.mu.Lock(); f.l[rank] = l; f.mu.Unlock() }
func (f *fakeLoad) read(rank uint32) Load   { f.mu.Lock(); defer f.mu.Unlock(); return f.l[rank] }

func TestLoadReporterIsChangeDrivenAndDebounced(t *testing.T) {
	p, err := New("kv_metrics")
	require.NoError(t, err)
	defer p.Close()
	require.LessOrEqual(t, p.ID(), uint64(maxJSONSafe))
	sub := subscribe(t, p)
	src := &fakeLoad{l: map[uint32]Load{}}
	r := NewLoadReporter(p, 42, src.read, Fields{})
	defer r.Close()

	require.NoError(t, r.Publish(0))
	first := next(t, sub)
	require.Equal(t, uint64(1), first.seq)
	require.Equal(t, uint64(42), first.load.WorkerID)
	require.True(t, first.load.HasKVUsedBlocks)
	require.False(t, first.load.HasDecodeBlocks, "dynamo.vllm field set by default")

	// A burst of changes inside the debounce window is one message.
	for i := uint64(1); i <= 5; i++ {
		src.set(0, Load{KVUsedBlocks: i})
		r.Changed(0)
	}
	got := next(t, sub)
	require.Equal(t, uint64(2), got.seq)
	require.Equal(t, uint64(5), got.load.KVUsedBlocks)

	// An unchanged load is not published again; a gap is visible as one.
	r.Changed(0)
	time.Sleep(20 * time.Millisecond)
	p.SkipSequence()
	src.set(0, Load{KVUsedBlocks: 9})
	r.Changed(0)
	got = next(t, sub)
	require.Equal(t, uint64(4), got.seq, "sequence 3 was skipped, and nothing was sent for the unchanged load")

	// Stalled: nothing is published while the load moves on.
	r.SetStalled(true)
	src.set(0, Load{KVUsedBlocks: 10})
	r.Changed(0)
	r.SetStalled(false)
	src.set(0, Load{KVUsedBlocks: 11})
	r.Changed(0)
	got = next(t, sub)
	require.Equal(t, uint64(11), got.load.KVUsedBlocks)
}

func TestRestartIsANewIncarnation(t *testing.T) {
	p, err := New("kv_metrics")
	require.NoError(t, err)
	defer p.Close()
	id, ep := p.ID(), p.Endpoint()
	require.NoError(t, p.Restart())
	require.NotEqual(t, id, p.ID())
	require.NotEqual(t, ep, p.Endpoint())
	sub := subscribe(t, p)
	require.NoError(t, p.Send([]byte{0x80}))
	frames, err := sub.ReadMessage()
	require.NoError(t, err)
	require.Len(t, frames, 4)
}
