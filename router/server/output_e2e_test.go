package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/fleet"
	"switchyard/recorder"
	"switchyard/router/active"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/sim/replay"
)

// With dynamo.kv.track_output_blocks on, the gateway counts a streamed
// answer's output as it passes: the decode rank's predicted output blocks
// decay while the request is still in flight (a real openai-go client
// streaming from engine workers that generate on the wall clock), the
// rank holds nothing once it ends, and the recording, with its output
// progress rows, replays every selection exactly.
func TestLiveOutputBlocksDecayAsTheAnswerStreams(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
server: {bind_address: "127.0.0.1:0"}
admin: {token: secret-admin-token}
disaggregated_serving: {enabled: true}
backends:
  - {name: frontend, type: openai, url: "http://%s", role: unified, models: [%q]}
dynamo:
  enabled: true
  discovery:
    etcd:
      embedded: {enabled: true, listen: "127.0.0.1:0"}
      watch_reconnect_backoff: {initial: 50ms, max: 1s}
  load: {direct_allow_cidrs: ["127.0.0.0/8"], max_staleness: 2s}
  kv: {track_output_blocks: true}
  shim: {backends: [frontend]}
`, l.Addr(), recordModel)), nil)
	require.NoError(t, err)
	masked, err := cfg.Masked().YAML()
	require.NoError(t, err)

	path := filepath.Join(t.TempDir(), "live.db")
	w, err := recorder.Create(path, recorder.Run{Kind: "live", Config: string(masked), Version: "test", Picker: "load",
		Start: time.Now()}, recorder.Options{})
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	srv, err := NewWithOptions(cfg, log, Options{Recorder: w})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			srv.Close()
			_, _ = w.Close()
		}
	}()

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	// Engines at the mocker's own pace: a decode step takes milliseconds,
	// so a long answer streams for a while.
	fl, err := fleet.Start(context.Background(), cli, fleet.Spec{Model: recordModel, Prefill: 1, Decode: 2,
		BlockSize: 16, SpeedupRatio: 1, LeaseTTL: 2, Engine: true}, log)
	require.NoError(t, err)
	defer fl.Close()
	fe := &http.Server{Handler: fl.Handler(log), ReadHeaderTimeout: 10 * time.Second}
	go fe.Serve(l)
	defer fe.Close()
	eventually(t, "the fleet", func() bool {
		s := srv.Discovery().Snapshot()
		return len(s.Workers) == 3 && s.CountPublishers(discovery.TopicLoad) == 3
	})
	require.True(t, srv.core.TracksOutput())

	// What the decode ranks hold in the core's account.
	decodeLoad := func() active.Load {
		var sum active.Load
		for _, wk := range srv.Discovery().Snapshot().Workers {
			if wk.Role == discovery.RoleDecode {
				l := srv.core.ActiveLoad(active.Rank{Namespace: wk.Namespace, WorkerID: wk.InstanceID})
				sum.OutputBlocks += l.OutputBlocks
				sum.Requests += l.Requests
			}
		}
		return sum
	}

	client := openai.NewClient(option.WithBaseURL("http://"+srv.Addr()+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	stream := func(i int, maxTokens int64, usage bool) (int, error) {
		params := openai.ChatCompletionNewParams{
			Model:     recordModel,
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("request %d: %s", i, longPrompt(i)))},
			MaxTokens: openai.Int(maxTokens),
		}
		if usage {
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		}
		s := client.Chat.Completions.NewStreaming(context.Background(), params)
		text := 0
		for s.Next() {
			if c := s.Current(); len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
				text++
			}
		}
		return text, s.Err()
	}

	// One long answer: 256 tokens predicted, 16 blocks of 16, on one
	// decode rank.
	const maxTokens, predicted = 256, 16
	done := make(chan error, 1)
	go func() {
		n, err := stream(0, maxTokens, true)
		if err == nil && n != maxTokens {
			err = fmt.Errorf("%d text chunks, want %d", n, maxTokens)
		}
		done <- err
	}()
	var seen []uint64
	eventually(t, "the predicted output blocks to decay while the answer streams", func() bool {
		l := decodeLoad()
		if l.Requests != 1 {
			return false
		}
		if len(seen) == 0 || seen[len(seen)-1] != l.OutputBlocks {
			seen = append(seen, l.OutputBlocks)
		}
		return l.OutputBlocks <= predicted-3
	})
	for i := 1; i < len(seen); i++ {
		require.Less(t, seen[i], seen[i-1], "the prediction only decays: %v", seen)
	}
	require.LessOrEqual(t, seen[0], uint64(predicted), "at most what the pick charged: %v", seen)
	require.NoError(t, <-done)
	eventually(t, "the answer's end to release its ranks", func() bool { return decodeLoad() == active.Load{} })

	// More answers at once, some with a usage chunk, so picks weigh other
	// requests' decaying predictions.
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := 1; i <= 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := stream(i, int64(40+8*i), i%2 == 0)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	srv.Close()
	st, err := w.Close()
	closed = true
	require.NoError(t, err)
	for table, n := range st.Dropped {
		require.Zero(t, n, "dropped %s records", table)
	}

	rd, err := recorder.Open(path)
	require.NoError(t, err)
	defer rd.Close()
	rep, err := replay.Run(rd, 0, "")
	require.NoError(t, err)
	require.Equal(t, 7, rep.Selections)
	require.True(t, rep.Exact(), "divergences: %+v", rep.Divergences)

	runs, err := rd.Runs()
	require.NoError(t, err)
	perRequest := map[uint64][]uint64{}
	require.NoError(t, rd.Entries(runs[0].ID, func(e recorder.Entry) error {
		if p, ok := e.Value.(recorder.Progress); ok {
			perRequest[p.RequestID] = append(perRequest[p.RequestID], p.OutputTokens)
		}
		return nil
	}))
	require.Len(t, perRequest, 7, "every streamed answer reported its output: %v", perRequest)
	var long []uint64
	for _, p := range perRequest {
		if len(p) > len(long) {
			long = p
		}
	}
	want := make([]uint64, 0, predicted)
	for b := uint64(1); b <= predicted; b++ {
		want = append(want, 16*b)
	}
	require.Equal(t, want, long, "the long answer at each block boundary, and not per token")
}
