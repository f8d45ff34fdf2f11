package frontend

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/worker"
)

// A client that goes away cancels the worker request, which frees its
// blocks: buffered and streamed, on both hops of a disaggregated pair.
func TestClientCancelFreesWorker(t *testing.T) {
	for _, streamed := range []bool{false, true} {
		f := newFleet(t)
		d := f.worker(decodeID).w
		// Decode steps take an hour: the request sits holding blocks.
		d.SetSlow(time.Hour)
		cli := f.client(dec, decStr, "x-dynamo-dp-rank", "2", "x-dynamo-prefill-instance-id", preStr)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			if streamed {
				s := cli.Chat.Completions.NewStreaming(ctx, chatParams(disaggModel, 50))
				for s.Next() {
				}
				done <- s.Err()
				_ = s.Close()
				return
			}
			_, err := cli.Chat.Completions.New(ctx, chatParams(disaggModel, 50))
			done <- err
		}()
		require.Eventually(t, func() bool { return d.Load(2).KVUsedBlocks > 0 }, 5*time.Second, time.Millisecond)
		assert.Equal(t, worker.Load{}, f.worker(prefillID).w.Load(0), "the prefill hop is over")
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		require.Eventually(t, func() bool { return d.Load(2) == worker.Load{} }, 5*time.Second, time.Millisecond,
			"streamed=%v: the decode worker let go", streamed)
	}
}

// Cancelling during the prefill hop frees the prefill worker, and the
// decode hop never starts.
func TestClientCancelDuringPrefill(t *testing.T) {
	f := newFleet(t)
	p := f.worker(prefillID).w
	p.SetStalled(true)
	cli := f.client(dec, decStr, "x-dynamo-prefill-instance-id", preStr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cli.Chat.Completions.New(ctx, chatParams(disaggModel, 5))
		done <- err
	}()
	require.Eventually(t, func() bool { return p.Load(0).ActivePrefillTokens > 0 }, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Eventually(t, func() bool { return p.Load(0) == worker.Load{} }, 5*time.Second, time.Millisecond)
	assert.Empty(t, f.worker(decodeID).rec.ranks())
}
