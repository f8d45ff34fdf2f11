package fleet_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/fleet"
	"switchyard/fakefleet/frontend"
	"switchyard/router/config"
	"switchyard/router/eventplane"
	"switchyard/router/load"
	"switchyard/router/server"
)

const model = "Qwen/Qwen3-0.6B"

// stack is a router with its embedded etcd, a fake fleet and the
// frontend emulation, all real and on loopback.
type stack struct {
	router *server.Server
	fleet  *fleet.Fleet
	client openai.Client
	base   string
}

func start(t *testing.T, spec fleet.Spec, maxStaleness string) *stack {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
server: {bind_address: "127.0.0.1:0"}
admin: {token: tok}
disaggregated_serving: {enabled: true}
backends:
  - {name: frontend, type: openai, url: "http://%s", role: unified, models: [%q]}
dynamo:
  enabled: true
  discovery:
    etcd:
      embedded: {enabled: true, listen: "127.0.0.1:0"}
      watch_reconnect_backoff: {initial: 50ms, max: 1s}
  load: {direct_allow_cidrs: ["127.0.0.0/8"], max_staleness: %s}
  shim: {backends: [frontend]}
`, l.Addr(), model, maxStaleness)), nil)
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	srv, err := server.New(cfg, log)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	spec.Model = model
	fl, err := fleet.Start(context.Background(), cli, spec, log)
	require.NoError(t, err)
	t.Cleanup(fl.Close)
	fe := &http.Server{Handler: frontend.New(fl.Directory(), log)}
	go fe.Serve(l)
	t.Cleanup(func() { fe.Close() })

	s := &stack{router: srv, fleet: fl, base: "http://" + srv.Addr()}
	s.client = openai.NewClient(option.WithBaseURL(s.base+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	n := spec.Prefill + spec.Decode + spec.Aggregated
	// Endpoint and Model records are separate puts: wait for every card.
	eventually(t, "the router to discover the fleet", func() bool {
		ws := srv.Discovery().Snapshot().Workers
		for _, w := range ws {
			if w.Model != model {
				return false
			}
		}
		return len(ws) == n
	})
	return s
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		time.Sleep(20 * time.Millisecond)
	}
}

// ask sends one chat completion asking the router to disclose the workers.
func (s *stack) ask(t *testing.T, prompt string) (decode, prefill uint64, err error) {
	var resp *http.Response
	_, err = s.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(4),
	}, option.WithHeader("x-backend", ""), option.WithResponseInto(&resp))
	if err != nil {
		return 0, 0, err
	}
	decode, _ = strconv.ParseUint(resp.Header.Get("x-switchyard-worker-instance-id"), 10, 64)
	prefill, _ = strconv.ParseUint(resp.Header.Get("x-switchyard-prefill-instance-id"), 10, 64)
	return decode, prefill, nil
}

func TestChatThroughRouterFrontendAndWorkers(t *testing.T) {
	for _, engine := range []bool{false, true} {
		t.Run(fmt.Sprintf("engine=%v", engine), func(t *testing.T) { chatThroughEverything(t, engine) })
	}
}

func chatThroughEverything(t *testing.T, engine bool) {
	s := start(t, fleet.Spec{Prefill: 2, Decode: 2, SpeedupRatio: 100, LeaseTTL: 2, Engine: engine}, "3s")
	roles := map[uint64]string{}
	for _, m := range s.fleet.Members() {
		roles[m.ID()] = m.Role
	}
	for i := 0; i < 6; i++ {
		d, p, err := s.ask(t, "Hello there, how are you today?")
		require.NoError(t, err)
		require.Equal(t, "decode", roles[d], "decode pin is a decode worker")
		require.Equal(t, "prefill", roles[p], "prefill pin is a prefill worker")
	}

	// Streaming through the same path.
	stream := s.client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Stream, please.")},
		MaxTokens: openai.Int(5),
	})
	var text strings.Builder
	for stream.Next() {
		for _, c := range stream.Current().Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	require.NotEmpty(t, text.String())

	// A worker dies: once its lease lapses the router drops it and traffic
	// continues on the others.
	victim := s.fleet.Members()[2] // a decode worker
	require.Equal(t, "decode", victim.Role)
	require.NoError(t, s.fleet.Kill(victim.ID()))
	eventually(t, "the lapsed worker to leave", func() bool { return len(s.router.Discovery().Snapshot().Workers) == 3 })
	for i := 0; i < 6; i++ {
		d, _, err := s.ask(t, "Still there?")
		require.NoError(t, err)
		require.NotEqual(t, victim.ID(), d)
	}
}

func TestStalledWorkerStopsReceivingRequests(t *testing.T) {
	// Samples stay fresh for the whole test, so the stall rule applies (it
	// is ignored when no worker has a fresh sample).
	s := start(t, fleet.Spec{Aggregated: 2, SpeedupRatio: 100, LeaseTTL: 2}, "1m")
	a, b := s.fleet.Members()[0], s.fleet.Members()[1]
	// Both workers serve first, so both have published fresh samples.
	served := map[uint64]bool{}
	for i := 0; i < 10 && len(served) < 2; i++ {
		d, _, err := s.ask(t, "warm up")
		require.NoError(t, err)
		served[d] = true
	}
	require.Len(t, served, 2)
	require.NoError(t, s.fleet.Stall(a.ID(), true))

	// Send until one request lands on the stalled worker (it hangs there).
	long := strings.Repeat("tell me a long story about switchyards ", 8) // several blocks
	hung := make(chan struct{})
	go func() {
		defer close(hung)
		for i := 0; i < 20; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, err := s.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(long)}, MaxTokens: openai.Int(2)})
			cancel()
			if err != nil {
				return // the one that hung on the stalled worker timed out
			}
		}
	}()
	time.Sleep(6 * time.Second) // past the 5 s stall threshold
	// Keep b busy enough to have fresh samples, and check nothing new goes to a.
	for i := 0; i < 8; i++ {
		d, _, err := s.ask(t, long)
		require.NoError(t, err)
		require.Equal(t, b.ID(), d, "the stalled worker gets no new request while the other has a cost")
	}
	<-hung
}

// With engine-backed workers, each worker also advertises a kv-events
// publisher, and the router discovers both channels of every worker.
func TestEngineWorkersAdvertiseKVEvents(t *testing.T) {
	s := start(t, fleet.Spec{Prefill: 1, Decode: 1, SpeedupRatio: 100, LeaseTTL: 2, Engine: true}, "3s")
	eventually(t, "both channels of both workers", func() bool {
		snap := s.router.Discovery().Snapshot()
		return snap.CountPublishers("kv_metrics") == 2 && snap.CountPublishers("kv-events") == 2
	})
	_, _, err := s.ask(t, "still serving through the frontend")
	require.NoError(t, err)

	// The kv-events channels carry their replay sockets through etcd and
	// discovery to the subscription targets; the load channels have none.
	targets, skips := eventplane.Targets(s.router.Discovery().Snapshot(), "kv-events")
	require.Empty(t, skips)
	require.Len(t, targets, 2)
	for _, tg := range targets {
		require.Empty(t, tg.ReplayRefused)
		require.Regexp(t, `^tcp://127\.0\.0\.1:\d+$`, tg.ReplayEndpoint)
		require.NotEqual(t, "tcp://"+tg.HostPort, tg.ReplayEndpoint)
	}
	loads, _ := eventplane.Targets(s.router.Discovery().Snapshot(), "kv_metrics")
	for _, tg := range loads {
		require.Empty(t, tg.ReplayEndpoint)
	}
}

// A fleet told to keep no replay buffer advertises no replay socket.
func TestFleetWithoutReplay(t *testing.T) {
	s := start(t, fleet.Spec{Aggregated: 1, SpeedupRatio: 100, LeaseTTL: 2, Engine: true, ReplayBuffer: -1}, "3s")
	eventually(t, "the kv-events channel", func() bool { return s.router.Discovery().Snapshot().CountPublishers("kv-events") == 1 })
	targets, _ := eventplane.Targets(s.router.Discovery().Snapshot(), "kv-events")
	require.Len(t, targets, 1)
	require.Empty(t, targets[0].ReplayEndpoint)
	require.Empty(t, targets[0].ReplayRefused)
}

// Faults the router must shrug off: a malformed discovery record beside a
// worker's own, a malformed load message, a sequence gap, a publisher
// restart. The worker stays routable through all of them.
func TestFaultsTheRouterSurvives(t *testing.T) {
	s := start(t, fleet.Spec{Aggregated: 1, SpeedupRatio: 100, LeaseTTL: 2, Engine: true}, "3s")
	id := s.fleet.Members()[0].ID()
	ctx := context.Background()
	require.NoError(t, s.fleet.MalformedRecord(ctx, id))
	require.NoError(t, s.fleet.Malformed(id))
	require.NoError(t, s.fleet.Gap(id))
	require.NoError(t, s.fleet.Drop(id, 2))
	require.ErrorIs(t, s.fleet.Drop(id+1, 1), fleet.ErrNoWorker)
	admin := httptest.NewServer(s.fleet.AdminHandler())
	defer admin.Close()
	for q, want := range map[string]int{"": http.StatusNoContent, "?n=3": http.StatusNoContent,
		"?n=0": http.StatusBadRequest, "?n=10001": http.StatusBadRequest, "?n=x": http.StatusBadRequest} {
		resp, err := http.Post(fmt.Sprintf("%s/fleet/workers/%d/drop%s", admin.URL, id, q), "", nil)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "drop%s", q)
	}
	require.NoError(t, s.fleet.RestartPublisher(ctx, id))
	require.NoError(t, s.fleet.Reset(id))
	eventually(t, "the new publisher incarnation", func() bool {
		snap := s.router.Discovery().Snapshot()
		for _, p := range snap.Publishers {
			if p.Topic == "kv_metrics" && p.PublisherID == s.fleet.Members()[0].PublisherID() {
				return true
			}
		}
		return false
	})
	require.Len(t, s.router.Discovery().Snapshot().Workers, 1, "the malformed record is skipped, the worker kept")
	d, _, err := s.ask(t, "are you still there?")
	require.NoError(t, err)
	require.Equal(t, id, d)
	_, body := getMetrics(t, s.base)
	require.Contains(t, body, `switchyard_dynamo_discovery_events_total{kind="malformed"} 1`)

	// The simulator's fail and slow faults, by instance id.
	require.NoError(t, s.fleet.Fail(id, true))
	_, _, err = s.ask(t, "fail me")
	require.Error(t, err, "generations answer 5xx")
	require.NoError(t, s.fleet.Fail(id, false))
	require.NoError(t, s.fleet.SlowBy(id, 3))
	d, _, err = s.ask(t, "slowly now")
	require.NoError(t, err)
	require.Equal(t, id, d)
	require.NoError(t, s.fleet.SlowBy(id, 1))
	require.ErrorIs(t, s.fleet.SlowBy(id+1, 2), fleet.ErrNoWorker)
	require.ErrorIs(t, s.fleet.Fail(id+1, true), fleet.ErrNoWorker)
}

func getMetrics(t *testing.T, base string) (int, string) {
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// A lease expiring under a living worker: its records leave discovery at
// once and stay gone (the keep-alive does not bring them back), while the
// worker keeps serving; re-registered, it comes back under a new lease,
// so a new instance id, publishes its load under that id, and is routed
// to by it.
func TestLeaseExpiryAndRegistrationUnderANewLease(t *testing.T) {
	s := start(t, fleet.Spec{Aggregated: 2, SpeedupRatio: 100, LeaseTTL: 2, Engine: true}, "3s")
	ctx := context.Background()
	old := s.fleet.Members()[0].ID()
	other := s.fleet.Members()[1].ID()
	require.NoError(t, s.fleet.ExpireLease(ctx, old))
	gone := func() bool {
		for _, w := range s.router.Discovery().Snapshot().Workers {
			if w.InstanceID == old {
				return false
			}
		}
		return true
	}
	eventually(t, "the expired worker to leave discovery", gone)
	// Longer than the lease TTL: nothing put the records back.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		require.True(t, gone(), "the expired worker's records came back")
		time.Sleep(100 * time.Millisecond)
	}
	d, _, err := s.ask(t, "who serves now?")
	require.NoError(t, err)
	require.Equal(t, other, d, "only the registered worker is routed to")

	next, err := s.fleet.Reregister(ctx, old)
	require.NoError(t, err)
	require.NotEqual(t, old, next, "a new lease is a new instance id")
	require.Equal(t, []uint64{next, other}, []uint64{s.fleet.Members()[0].ID(), s.fleet.Members()[1].ID()}, "start order kept")
	// The first sample under the new id races the router's subscription
	// (ZMQ PUB drops what precedes it): publish again until one lands.
	eventually(t, "the worker to return under its new id with a load sample", func() bool {
		for _, w := range s.router.Discovery().Snapshot().Workers {
			if w.InstanceID == next {
				if _, ok := s.router.Loads().Latest(load.Key{Namespace: w.Namespace, WorkerID: next}); ok {
					return true
				}
				require.NoError(t, s.fleet.PublishLoad(next))
				return false
			}
		}
		return false
	})
	require.ErrorIs(t, s.fleet.ExpireLease(ctx, old), fleet.ErrNoWorker, "the old id is gone")
	require.NoError(t, s.fleet.Stall(other, true))
	eventually(t, "a request to reach the re-registered worker", func() bool {
		d, _, err := s.ask(t, "and now?")
		return err == nil && d == next
	})
}
