package engineworker_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"switchyard/fakefleet/engine"
	"switchyard/fakefleet/engineworker"
	"switchyard/fakefleet/publish"
	"switchyard/router/clock"
	"switchyard/router/envelope"
	"switchyard/router/eventplane/zmtp"
	"switchyard/router/kv"
)

// fast keeps real-clock tests quick while still stepping the engine.
var fast = engine.Constant{Prefill: time.Millisecond, Step: time.Millisecond}

// kvSubscriber wires w's KV events to a kv-events publisher for workerID
// and subscribes to it with the router's own ZMTP client.
func kvSubscriber(t *testing.T, w *engineworker.Worker, workerID uint64) *zmtp.Sub {
	t.Helper()
	pub, err := publish.New(publish.KVEventsTopic)
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	rep, err := publish.NewKVReporter(pub, workerID)
	require.NoError(t, err)
	w.OnKVEvents(func(rank uint32, evs []engine.KVEvent) { _ = rep.Report(rank, evs) })

	conn, err := net.Dial("tcp", strings.TrimPrefix(pub.Endpoint(), "tcp://"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	sub, err := zmtp.Handshake(conn, [][]byte{[]byte(publish.KVEventsTopic)}, envelope.KVEventLimits)
	require.NoError(t, err)
	require.Eventually(t, pub.HasSubscriber, 5*time.Second, 2*time.Millisecond)
	return sub
}

// u64 folds msgpack's compact integer widths.
func u64(t *testing.T, v any) uint64 {
	t.Helper()
	switch x := v.(type) {
	case int8:
		return uint64(x)
	case int16:
		return uint64(x)
	case int32:
		return uint64(x)
	case int64:
		return uint64(x)
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case uint64:
		return x
	}
	t.Fatalf("not an integer: %#v", v)
	return 0
}

// readEvent reads one kv-events message and decodes its RouterEvent into
// plain maps, as a consumer that trusts no Go type would.
func readEvent(t *testing.T, sub *zmtp.Sub) map[string]any {
	t.Helper()
	frames, err := sub.ReadMessage()
	require.NoError(t, err)
	require.Len(t, frames, 4)
	require.Equal(t, "kv-events", string(frames[0]))
	var env map[string]any
	require.NoError(t, msgpack.Unmarshal(frames[3][5:], &env))
	var ev map[string]any
	require.NoError(t, msgpack.Unmarshal(env["payload"].([]byte), &ev))
	return ev
}

type stored struct {
	eventID uint64
	parent  *uint64
	blocks  [][2]uint64 // block_hash, tokens_hash
}

func asStored(t *testing.T, ev map[string]any, workerID uint64) stored {
	t.Helper()
	require.Equal(t, workerID, u64(t, ev["worker_id"]))
	require.Equal(t, "device", ev["storage_tier"])
	inner := ev["event"].(map[string]any)
	require.Equal(t, uint64(0), u64(t, inner["dp_rank"]))
	data, ok := inner["data"].(map[string]any)
	require.True(t, ok, "not a stored event: %#v", inner["data"])
	st, ok := data["stored"].(map[string]any)
	require.True(t, ok, "not a stored event: %#v", data)
	out := stored{eventID: u64(t, inner["event_id"])}
	if p := st["parent_hash"]; p != nil {
		v := u64(t, p)
		out.parent = &v
	}
	for _, b := range st["blocks"].([]any) {
		m := b.(map[string]any)
		out.blocks = append(out.blocks, [2]uint64{u64(t, m["block_hash"]), u64(t, m["tokens_hash"])})
	}
	return out
}

func seqTokens(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func TestStoredEventsMatchRouterHashes(t *testing.T) {
	const workerID = 0x42
	w := engineworker.New(engineworker.Config{BlockSize: 16, TotalKVBlocks: 64, Timing: fast}, clock.Real{})
	defer w.Close()
	var changes atomic.Int64
	w.OnChange(func(uint32) { changes.Add(1) })
	sub := kvSubscriber(t, w, workerID)
	ctx := context.Background()

	prompt := seqTokens(0, 64)
	var text []string
	res, err := w.Generate(ctx, engineworker.Request{Tokens: prompt, MaxTokens: 3}, func(s string) error {
		text = append(text, s)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, engineworker.Result{PromptTokens: 64, CompletionTokens: 3, FinishReason: "length"}, res)
	require.Len(t, text, 3, "one word per generated token")
	require.Equal(t, engineworker.Load{}, w.Load(0), "cached blocks are free once the request ends")
	require.Positive(t, changes.Load())

	// The engine may split the prompt's blocks over several Stored events;
	// together they must be the router's hashes, in order, each event
	// chained to the block before it.
	wantLocal := kv.BlockHashes(prompt, 16, kv.Seed("", ""))
	wantSeq := kv.SequenceHashes(wantLocal)
	var got [][2]uint64
	lastID := uint64(0)
	for len(got) < len(wantLocal) {
		st := asStored(t, readEvent(t, sub), workerID)
		require.Equal(t, lastID+1, st.eventID, "event ids are the engine's, from 1")
		lastID = st.eventID
		if len(got) == 0 {
			require.Nil(t, st.parent, "the first block is a root")
		} else {
			require.NotNil(t, st.parent)
			require.Equal(t, got[len(got)-1][0], *st.parent)
		}
		got = append(got, st.blocks...)
	}
	require.Len(t, got, len(wantLocal))
	for i := range wantLocal {
		require.Equal(t, wantLocal[i], got[i][1], "tokens_hash of block %d", i)
		require.Equal(t, wantSeq[i], got[i][0], "block_hash of block %d", i)
	}

	// The same prompt again is a prefix-cache hit: nothing new is stored.
	// A fresh one-block prompt afterwards is the fence: its Stored event
	// must be the very next message.
	_, err = w.Generate(ctx, engineworker.Request{Tokens: prompt, MaxTokens: 2}, nil)
	require.NoError(t, err)
	require.Equal(t, engineworker.Load{}, w.Load(0))
	fence := seqTokens(1000, 16)
	_, err = w.Generate(ctx, engineworker.Request{Tokens: fence, MaxTokens: 1}, nil)
	require.NoError(t, err)
	st := asStored(t, readEvent(t, sub), workerID)
	require.Equal(t, lastID+1, st.eventID, "the repeated prompt stored nothing")
	require.Nil(t, st.parent)
	require.Equal(t, [][2]uint64{{kv.BlockHashes(fence, 16, kv.Seed("", ""))[0], kv.BlockHashes(fence, 16, kv.Seed("", ""))[0]}}, st.blocks)
	require.Equal(t, engineworker.Load{}, w.Load(0))
}
