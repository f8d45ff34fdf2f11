package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/fleet"
	"switchyard/recorder"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/eventplane"
	"switchyard/router/events"
	"switchyard/sim/replay"
)

const recordModel = "Qwen/Qwen3-0.6B"

// A whole live stack recorded to SQLite: the router with its embedded
// etcd, fake engine workers registered under real leases and publishing
// their load over real ZMQ, the direct-mode frontend emulation, and real
// OpenAI clients, buffered and streaming, some at once. Midway a worker's
// publisher restarts and a decode worker dies. The replay of the file
// makes every one of the router's selections again.
func TestLiveRecordingReplaysExactly(t *testing.T) {
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
	fl, err := fleet.Start(context.Background(), cli, fleet.Spec{Model: recordModel, Prefill: 2, Decode: 2,
		SpeedupRatio: 200, LeaseTTL: 2, Engine: true}, log)
	require.NoError(t, err)
	defer fl.Close()
	fe := &http.Server{Handler: fl.Handler(log), ReadHeaderTimeout: 10 * time.Second}
	go fe.Serve(l)
	defer fe.Close()

	snapshot := func() *discovery.Snapshot { return srv.Discovery().Snapshot() }
	eventually(t, "the fleet with its cards and publishers", func() bool {
		s := snapshot()
		return len(s.Workers) == 4 && !slices.ContainsFunc(s.Workers, func(w *discovery.Worker) bool { return w.Model != recordModel }) &&
			s.CountPublishers(discovery.TopicLoad) == 4
	})
	// Workers publish on change: with every subscription up, the first
	// requests' load reaches the router.
	connected := func() int {
		n := 0
		for _, sub := range srv.loadSubs.Subscriptions() {
			if sub.State == eventplane.Connected {
				n++
			}
		}
		return n
	}
	eventually(t, "every load subscription", func() bool { return connected() == 4 })

	client := openai.NewClient(option.WithBaseURL("http://"+srv.Addr()+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	var mu sync.Mutex
	sent := 0
	ask := func(i int, stream bool) error {
		params := openai.ChatCompletionNewParams{
			Model:     recordModel,
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("request %d: %s", i, longPrompt(i)))},
			MaxTokens: openai.Int(int64(4 + i%5)),
		}
		mu.Lock()
		sent++
		mu.Unlock()
		if !stream {
			resp, err := client.Chat.Completions.New(context.Background(), params)
			if err == nil && len(resp.Choices) == 0 {
				err = fmt.Errorf("request %d: no choices", i)
			}
			return err
		}
		s := client.Chat.Completions.NewStreaming(context.Background(), params)
		chunks := 0
		for s.Next() {
			chunks++
		}
		if err := s.Err(); err != nil {
			return err
		}
		if chunks == 0 {
			return fmt.Errorf("request %d: an empty stream", i)
		}
		return nil
	}
	burst := func(from, n int) {
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := from; i < from+n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- ask(i, i%2 == 0)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}

	// Sequential, then concurrent.
	for i := 0; i < 8; i++ {
		require.NoError(t, ask(i, i%3 == 0))
	}
	burst(8, 12)

	// A prefill worker's publisher restarts under a new id: its channel
	// record changes and a new subscription starts.
	members := fl.Members()
	var prefill, decode *fleet.Member
	for _, m := range members {
		switch {
		case m.Role == "prefill" && prefill == nil:
			prefill = m
		case m.Role == "decode" && decode == nil:
			decode = m
		}
	}
	oldPub := prefill.PublisherID()
	require.NoError(t, fl.RestartPublisher(context.Background(), prefill.ID()))
	eventually(t, "the new publisher", func() bool {
		for _, p := range snapshot().Publishers {
			if p.Topic == discovery.TopicLoad && p.PublisherID == prefill.PublisherID() {
				return true
			}
		}
		return false
	})
	require.NotEqual(t, oldPub, prefill.PublisherID())
	burst(20, 10)

	// A decode worker dies; its lease lapses and the router drops it.
	require.NoError(t, fl.Kill(decode.ID()))
	eventually(t, "the dead worker to leave", func() bool { return len(snapshot().Workers) == 3 })
	burst(30, 10)

	// Stop the router first, then the recording: nothing is lost.
	srv.Close()
	st, err := w.Close()
	closed = true
	require.NoError(t, err)
	for table, n := range st.Dropped {
		require.Zero(t, n, "dropped %s records", table)
	}
	require.Equal(t, 40, sent)

	rd, err := recorder.Open(path)
	require.NoError(t, err)
	defer rd.Close()
	rep, err := replay.Run(rd, 0, "")
	require.NoError(t, err)
	t.Logf("replay: %d selections, %d reproduced, %d inputs", rep.Selections, rep.Reproduced, rep.Inputs)
	require.Equal(t, 40, rep.Selections, "one pinned selection per request")
	require.True(t, rep.Exact(), "divergences: %+v, generation mismatches %d, load result mismatches %d",
		rep.Divergences, rep.GenerationMismatches, rep.LoadResultMismatches)

	// What the file holds.
	runs, err := rd.Runs()
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, "live", runs[0].Kind)
	require.False(t, runs[0].EndedAt.IsZero())
	require.NotContains(t, runs[0].Config, "secret-admin-token", "the configuration is stored masked")
	counts := map[string]int{}
	loadResults := map[string]int{}
	var deletes, resyncs int
	var pickedDecodes = map[uint64]bool{}
	require.NoError(t, rd.Entries(runs[0].ID, func(e recorder.Entry) error {
		switch v := e.Value.(type) {
		case events.DiscoveryPut:
			counts["put"]++
		case events.DiscoveryDelete:
			deletes++
		case events.DiscoveryResync:
			resyncs++
		case recorder.Published:
			counts["published"]++
		case events.LoadConnected:
			counts["connected"]++
		case recorder.LoadMessage:
			loadResults[v.Result]++
		case recorder.Request:
			counts["request"]++
			require.Equal(t, "/v1/chat/completions", v.Route)
			require.Positive(t, v.MaxTokens)
			require.Positive(t, v.PromptTokens)
			require.Equal(t, []string{"dynamo"}, v.Namespaces)
		case recorder.Selection:
			require.True(t, v.OK)
			require.True(t, v.Sel.HasPrefill, "a decode worker with a prefill worker beside it")
			require.NotEmpty(t, v.Candidates)
			pickedDecodes[v.Sel.Decode.WorkerID] = true
			counts["reason "+v.Sel.DecodeReason]++
		}
		return nil
	}))
	t.Logf("recorded: %v, load results %v, %d deletes, %d resyncs", counts, loadResults, deletes, resyncs)
	require.Positive(t, counts["put"]+resyncs)
	require.Positive(t, deletes, "the dead worker's records vanished")
	require.GreaterOrEqual(t, counts["published"], 3)
	require.GreaterOrEqual(t, counts["connected"], 5, "four subscriptions and the restarted publisher's")
	require.Positive(t, loadResults["applied"])
	require.Equal(t, 40, counts["request"])
	require.Len(t, pickedDecodes, 2, "both decode workers served")

	outs, err := rd.Outcomes(runs[0].ID)
	require.NoError(t, err)
	require.Len(t, outs, 40)
	counted := 0
	for _, o := range outs {
		require.Equal(t, recorder.StatusOK, o.Status, "request %d: %s", o.RequestID, o.Error)
		require.Positive(t, o.TTFT)
		require.GreaterOrEqual(t, o.E2E, o.TTFT)
		// Streamed answers count their text events: max_tokens is 4..8.
		if o.OutputTokens > 0 {
			counted++
			require.True(t, o.OutputTokens >= 4 && o.OutputTokens <= 8, "request %d: %d output tokens", o.RequestID, o.OutputTokens)
			require.Positive(t, o.ITL)
		}
	}
	require.Positive(t, counted, "the streamed requests' output tokens were counted")
}

// longPrompt varies the prompt's size, so the picker's costs differ.
func longPrompt(i int) string {
	b := make([]byte, 0, 64*(i%7+1))
	for len(b) < cap(b) {
		b = append(b, "the quick brown fox "...)
	}
	return string(b)
}
