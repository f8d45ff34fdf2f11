package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/fleet"
	"switchyard/fakefleet/registrar"
	"switchyard/fakefleet/wire"
	"switchyard/recorder"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/eventplane"
	"switchyard/router/events"
	"switchyard/router/kv"
	"switchyard/router/picker"
	"switchyard/sim/replay"
)

const kvModel = "Qwen/Qwen3-0.6B"

// kvFleetConfig is a router with KV-aware selection in front of a fake
// fleet's direct-mode frontend listening on frontend.
func kvFleetConfig(t *testing.T, frontend net.Addr) *config.Config {
	t.Helper()
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
  load: {direct_allow_cidrs: ["127.0.0.0/8"], max_staleness: 2s}
  shim: {backends: [frontend]}
  kv: {enabled: true}
`, frontend, kvModel)), nil)
	require.NoError(t, err)
	return cfg
}

// kvStack is a router, its embedded etcd and a fake engine fleet with its
// frontend emulation.
type kvStack struct {
	srv  *Server
	fl   *fleet.Fleet
	stop func() // the fleet and its clients, then the router
}

func startKVStack(t *testing.T, spec fleet.Spec, opts func(*config.Config) Options) *kvStack {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	cfg := kvFleetConfig(t, l.Addr())
	var o Options
	if opts != nil {
		o = opts(cfg)
	}
	srv, err := NewWithOptions(cfg, log, o)
	require.NoError(t, err)
	k := &kvStack{srv: srv}
	var closers []func()
	var once sync.Once
	// The embedded etcd waits for its clients' connections: they close first.
	k.stop = func() {
		once.Do(func() {
			for _, c := range slices.Backward(closers) {
				c()
			}
			srv.Close()
		})
	}
	t.Cleanup(k.stop)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	closers = append(closers, func() { cli.Close() })
	spec.Model, spec.SpeedupRatio, spec.LeaseTTL, spec.Engine = kvModel, 200, 2, true
	k.fl, err = fleet.Start(context.Background(), cli, spec, log)
	require.NoError(t, err)
	closers = append(closers, k.fl.Close)
	fe := &http.Server{Handler: k.fl.Handler(log), ReadHeaderTimeout: 10 * time.Second}
	go fe.Serve(l)
	closers = append(closers, func() { fe.Close() })

	workers := spec.Prefill + spec.Decode + spec.Aggregated
	eventually(t, "the fleet with its cards and both channels", func() bool {
		s := srv.Discovery().Snapshot()
		return len(s.Workers) == workers && !slices.ContainsFunc(s.Workers, func(w *discovery.Worker) bool { return w.Model != kvModel }) &&
			s.CountPublishers(discovery.TopicLoad) == workers && s.CountPublishers(discovery.TopicKVEvents) == workers
	})
	connected := func(subs []eventplane.SubscriptionInfo) int {
		n := 0
		for _, s := range subs {
			if s.State == eventplane.Connected {
				n++
			}
		}
		return n
	}
	eventually(t, "every subscription of both families", func() bool {
		return connected(srv.loadSubs.Subscriptions()) == workers && connected(srv.kvSubs.Subscriptions()) == workers
	})
	return k
}

// createRecording starts a live recording of a router running cfg, as
// serve --record does.
func createRecording(t *testing.T, path string, cfg *config.Config, seed uint64) *recorder.Writer {
	t.Helper()
	masked, err := cfg.Masked().YAML()
	require.NoError(t, err)
	w, err := recorder.Create(path, recorder.Run{Kind: "live", Config: string(masked), Version: "test", Picker: PickerName(cfg),
		Seed: seed, Start: time.Now()}, recorder.Options{})
	require.NoError(t, err)
	return w
}

// chat sends one buffered chat completion asking for disclosure and
// returns the pinned worker ids (decode, prefill; 0 when none).
func (k *kvStack) chat(t *testing.T, prompt string) (decode, prefill uint64) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":%q}]}`, kvModel, prompt)
	req, err := http.NewRequest(http.MethodPost, "http://"+k.srv.Addr()+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Backend", "")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Choices []any `json:"choices"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.Equal(t, 200, resp.StatusCode)
	require.NotEmpty(t, out.Choices)
	decode, _ = strconv.ParseUint(resp.Header.Get("X-Switchyard-Worker-Instance-Id"), 10, 64)
	prefill, _ = strconv.ParseUint(resp.Header.Get("X-Switchyard-Prefill-Instance-Id"), 10, 64)
	require.NotZero(t, decode)
	return decode, prefill
}

// metricValue reads one series from the router's /metrics.
func metricValue(t *testing.T, srv *Server, series string) float64 {
	t.Helper()
	_, b := get(t, "http://"+srv.Addr()+"/metrics", "")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	require.NotNil(t, m, "no series %s", series)
	v, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return v
}

// blocksByWorker sums the index's blocks per worker.
func blocksByWorker(tr *kv.Tracker) map[uint64]int {
	out := map[uint64]int{}
	for _, r := range tr.Stats().Ranks {
		out[r.Rank.WorkerID] += r.Blocks
	}
	return out
}

// KV-overlap-aware routing live: a router with dynamo.kv.enabled in front
// of fake engine workers (real leases, real ZMQ, the direct-mode frontend
// emulation). Every worker's kv-events subscription connects beside its
// kv_metrics one and shows in the admin API and the metrics; requests
// make the engines cache blocks, whose events the index applies for
// exactly the workers that served; every client request is scored without
// the overlap term (no token ids yet) and counted tokenizer_unavailable;
// a killed worker's ranks leave the index with it.
func TestKVAwareRoutingEndToEnd(t *testing.T) {
	k := startKVStack(t, fleet.Spec{Prefill: 1, Decode: 2}, nil)
	srv := k.srv
	require.Equal(t, picker.NameKV, PickerName(srv.cfg.Load()))

	code, b := get(t, "http://"+srv.Addr()+"/admin/dynamo/workers", "tok")
	require.Equal(t, 200, code)
	var body struct {
		KVEventPublishers int `json:"kv_event_publishers"`
		Subscriptions     []struct {
			Family, State, Transport string
		} `json:"subscriptions"`
	}
	require.NoError(t, json.Unmarshal(b, &body))
	require.Equal(t, 3, body.KVEventPublishers)
	families := map[string]int{}
	for _, s := range body.Subscriptions {
		families[s.Family]++
		require.Equal(t, "connected", s.State)
		require.Equal(t, "direct", s.Transport)
	}
	require.Equal(t, map[string]int{"kv_metrics": 3, "kv-events": 3}, families)
	require.Equal(t, 3.0, metricValue(t, srv, `switchyard_dynamo_kv_subscriptions{state="connected",transport="direct"}`))
	applied := `switchyard_dynamo_kv_events_total{result="applied"}`
	before := metricValue(t, srv, applied)

	served := map[uint64]bool{}
	const requests = 12
	for i := range requests {
		// Half the prompts repeat: cached prefixes are re-announced.
		d, p := k.chat(t, fmt.Sprintf("request %d: %s", i%6, longPrompt(i%6)))
		require.NotZero(t, p, "a decode worker with a prefill worker beside it")
		served[d], served[p] = true, true
	}
	eventually(t, "the served workers' blocks in the index", func() bool {
		held := blocksByWorker(srv.KV())
		for w := range served {
			if held[w] == 0 {
				return false
			}
		}
		return true
	})
	require.Greater(t, metricValue(t, srv, applied), before)
	require.Positive(t, metricValue(t, srv, "switchyard_dynamo_kv_index_nodes"))
	require.Positive(t, metricValue(t, srv, "switchyard_dynamo_kv_index_ownerships"))
	for w, n := range blocksByWorker(srv.KV()) {
		if !served[w] {
			require.Zero(t, n, "worker %x served nothing, so it caches nothing", w)
		}
	}
	require.Equal(t, float64(requests), metricValue(t, srv, `switchyard_dynamo_kv_selection_total{result="tokenizer_unavailable"}`),
		"client requests carry no token ids yet")
	require.Zero(t, metricValue(t, srv, `switchyard_dynamo_kv_selection_total{result="overlap"}`))
	require.Zero(t, testutil.ToFloat64(srv.metrics.KV.Events.WithLabelValues("malformed")))

	// A decode worker that cached blocks dies; its lease lapses, discovery
	// drops it, and its ranks leave the index.
	var victim uint64
	for _, m := range k.fl.Members() {
		if m.Role == "decode" && served[m.ID()] {
			victim = m.ID()
			break
		}
	}
	require.NotZero(t, victim)
	require.NoError(t, k.fl.Kill(victim))
	eventually(t, "the dead worker's ranks to leave the index", func() bool {
		for _, r := range srv.KV().Stats().Ranks {
			if r.Rank.WorkerID == victim {
				return false
			}
		}
		return true
	})
	eventually(t, "its subscriptions to stop", func() bool {
		return metricValue(t, srv, `switchyard_dynamo_kv_subscriptions{state="connected",transport="direct"}`) == 2
	})
	d, _ := k.chat(t, "after the kill")
	require.NotEqual(t, victim, d)
	require.Equal(t, float64(requests+1), metricValue(t, srv, `switchyard_dynamo_kv_selection_total{result="tokenizer_unavailable"}`))
}

// The same stack recorded: kv-events messages are recorded with the
// tracker's result, in order with everything else, under the "kv" picker
// and the router's seed, and the replay reproduces every selection and
// every kv-events result.
func TestLiveKVRecordingReplaysExactly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.db")
	var w *recorder.Writer
	k := startKVStack(t, fleet.Spec{Prefill: 1, Decode: 2}, func(cfg *config.Config) Options {
		w = createRecording(t, path, cfg, 77)
		return Options{Recorder: w, Seed: 77}
	})
	var victim uint64
	for i := range 16 {
		d, _ := k.chat(t, fmt.Sprintf("request %d: %s", i%5, longPrompt(i%5)))
		if i == 7 {
			victim = d
			require.NoError(t, k.fl.Kill(victim))
			eventually(t, "the dead worker to leave", func() bool { return len(k.srv.Discovery().Snapshot().Workers) == 2 })
		}
	}
	k.stop()
	st, err := w.Close()
	require.NoError(t, err)
	for table, n := range st.Dropped {
		require.Zero(t, n, "dropped %s records", table)
	}

	rd, err := recorder.Open(path)
	require.NoError(t, err)
	defer rd.Close()
	rep, err := replay.Run(rd, 0, "")
	require.NoError(t, err)
	require.Equal(t, picker.NameKV, rep.Recorded)
	require.Equal(t, 16, rep.Selections)
	require.True(t, rep.Exact(), "divergences %+v, kv result mismatches %d, load %d, generations %d",
		rep.Divergences, rep.KVResultMismatches, rep.LoadResultMismatches, rep.GenerationMismatches)

	results := map[string]int{}
	connects := 0
	runs, err := rd.Runs()
	require.NoError(t, err)
	require.NoError(t, rd.Entries(runs[0].ID, func(e recorder.Entry) error {
		switch v := e.Value.(type) {
		case events.KVConnected:
			connects++
		case recorder.KVMessage:
			results[v.Result]++
		}
		return nil
	}))
	t.Logf("kv-events recorded: %d connects, results %v", connects, results)
	require.GreaterOrEqual(t, connects, 3)
	require.Positive(t, results["applied"])
}

// The 60 s rule in a running router, shortened: a worker's kv-events
// publisher goes away while the worker stays registered; once its
// subscription has been without a session for the stale time, the blocks
// it reported leave the index, with one warning. Recorded, the session
// events and the tick that cleared it are inputs a replay applies at the
// same points, and the clearing their output.
func TestKVStalePublisherIsCleared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stale.db")
	cfg := embeddedConfig("tok")
	cfg.Dynamo.KV.Enabled = true
	w := createRecording(t, path, cfg, 5)
	logs := &logCapture{}
	srv, err := NewWithOptions(cfg, slog.New(logs), Options{Recorder: w, Seed: 5,
		kvStaleAfter: 400 * time.Millisecond, tickEvery: 20 * time.Millisecond})
	require.NoError(t, err)
	defer srv.Close()

	addr := freeAddr(t)
	pub := zmq4.NewPub(context.Background())
	require.NoError(t, pub.Listen("tcp://"+addr))
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	const publisherID = 2718281828
	reg, err := registrar.Register(context.Background(), cli, registrar.Worker{
		Namespace: "dynamo", Component: "backend", WorkerType: "aggregated", Model: "m", BlockSize: 16,
		TotalKVBlocks: 64, MaxNumBatchedTokens: 512, MaxNumSeqs: 4, ContextLength: 1024, Transport: "127.0.0.1:9/x",
		Channels: []registrar.Channel{{Topic: "kv-events", PublisherID: publisherID, Endpoint: "tcp://" + addr}},
	}, 5, nil)
	require.NoError(t, err)
	defer reg.Kill()
	worker := reg.InstanceID()

	eventually(t, "the kv-events subscription", func() bool {
		subs := srv.kvSubs.Subscriptions()
		return len(subs) == 1 && subs[0].State == eventplane.Connected
	})
	for id := uint64(1); blocksByWorker(srv.KV())[worker] == 0; id++ {
		require.Less(t, id, uint64(2000), "no event reached the index")
		ev := wire.RouterEvent{WorkerID: worker, StorageTier: "device", Event: wire.KvCacheEvent{EventID: id,
			Data: wire.KvEventData{Stored: &wire.KvStoreData{Blocks: []wire.StoredBlock{{BlockHash: 1000 + id, TokensHash: 5000 + id}}}}}}
		require.NoError(t, pub.Send(zmq4.NewMsgFrom(wire.KVEventsMessage(publisherID, id, ev, time.Now())...)))
		time.Sleep(10 * time.Millisecond)
	}
	const warning = "without a session for too long"
	require.Zero(t, logs.count(slog.LevelWarn, warning))

	pub.Close()
	eventually(t, "the publisher's blocks to leave the index", func() bool { return blocksByWorker(srv.KV())[worker] == 0 })
	require.Len(t, srv.Discovery().Snapshot().Workers, 1, "the worker itself is still there")
	require.Equal(t, 1, logs.count(slog.LevelWarn, warning))
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 1, logs.count(slog.LevelWarn, warning), "once per episode")

	// Clients first: the embedded etcd waits for their connections.
	reg.Kill()
	cli.Close()
	srv.Close()
	_, err = w.Close()
	require.NoError(t, err)
	rd, err := recorder.Open(path)
	require.NoError(t, err)
	defer rd.Close()
	rep, err := replay.Run(rd, 0, "")
	require.NoError(t, err)
	require.True(t, rep.Exact(), "kv result mismatches %d", rep.KVResultMismatches)
	runs, err := rd.Runs()
	require.NoError(t, err)
	var lost, applied int
	require.NoError(t, rd.Entries(runs[0].ID, func(e recorder.Entry) error {
		if v, ok := e.Value.(recorder.KVMessage); ok {
			switch {
			case v.Frames == nil:
				require.Equal(t, kv.PublisherLostResult, v.Result)
				require.Equal(t, uint64(publisherID), v.PublisherID)
				lost++
			case v.Result == "applied":
				applied++
			}
		}
		return nil
	}))
	require.Equal(t, 1, lost, "the clearing is recorded once")
	require.Positive(t, applied)
}

// Reloads of dynamo.kv: turning it on swaps in the KV-aware picker and
// starts the kv-events subscriptions; each selection setting reaches the
// running picker; turning it off swaps the load-based picker back and
// stops the subscriptions.
func TestKVReload(t *testing.T) {
	base := embeddedConfig("tok")
	srv, err := New(base, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	for i, role := range []string{"prefill", "decode"} {
		reg, err := registrar.Register(context.Background(), cli, registrar.Worker{
			Namespace: "dynamo", Component: role, WorkerType: role, Model: "m", BlockSize: 16,
			TotalKVBlocks: 64, MaxNumBatchedTokens: 512, MaxNumSeqs: 4, ContextLength: 1024, Transport: "127.0.0.1:9/x",
			Channels: []registrar.Channel{{Topic: "kv-events", PublisherID: uint64(900 + i), Endpoint: "tcp://127.0.0.1:9"}},
		}, 5, nil)
		require.NoError(t, err)
		defer reg.Kill()
	}
	eventually(t, "the pair with its cards", func() bool {
		s := srv.Discovery().Snapshot()
		return len(s.Workers) == 2 && !slices.ContainsFunc(s.Workers, func(w *discovery.Worker) bool { return w.Model != "m" })
	})
	ids := uint64(0)
	pick := func() picker.Selection {
		t.Helper()
		ids++
		sel, ok := srv.core.Pick(picker.Request{ID: ids, Model: "m", Namespaces: []string{"dynamo"}, PromptTokens: 100,
			Now: time.Now()})
		require.True(t, ok)
		return sel
	}
	unavailable := func() float64 {
		return testutil.ToFloat64(srv.metrics.KV.Selection.WithLabelValues(picker.KVTokenizerUnavailable))
	}
	kvOptions := func() picker.KVOptions {
		t.Helper()
		st := srv.core.Settings()
		require.Equal(t, picker.NameKV, st.Picker, "the KV-aware picker is active")
		return st.KV
	}

	// Off: the load-based picker, no kv-events subscription.
	require.True(t, pick().HasPrefill)
	require.Zero(t, unavailable())
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, srv.kvSubs.Subscriptions())

	on := embeddedConfig("tok")
	on.Dynamo.KV.Enabled = true
	require.NoError(t, srv.Reload(on))
	require.True(t, pick().HasPrefill)
	require.Equal(t, 1.0, unavailable(), "the KV-aware picker selects now")
	eventually(t, "the kv-events subscriptions", func() bool { return len(srv.kvSubs.Subscriptions()) == 2 })
	require.Equal(t, 1.0, kvOptions().OverlapScoreCredit)

	tuned := embeddedConfig("tok")
	tuned.Dynamo.KV.Enabled = true
	tuned.Dynamo.KV.OverlapScoreCredit = 0.5
	tuned.Dynamo.KV.PrefillLoadScale = 2
	tuned.Dynamo.KV.RouterTemperature = 0.25
	require.NoError(t, srv.Reload(tuned))
	require.Equal(t, picker.KVOptions{OverlapScoreCredit: 0.5, PrefillLoadScale: 2, Temperature: 0.25,
		Track: picker.Tracking{ActiveBlocks: true, PrefillTokens: true}}, kvOptions(), "tracking is on by default")

	tuned.Dynamo.KV.ConditionalDisaggregation.Enabled = true
	require.NoError(t, srv.Reload(tuned))
	sel := pick()
	require.True(t, sel.Bypass, "a short prompt with nothing cached is prefilled on the decode worker")
	require.False(t, sel.HasPrefill)

	bypassed := func() float64 { return testutil.ToFloat64(srv.metrics.KV.Selection.WithLabelValues(picker.KVBypass)) }
	require.Equal(t, 1.0, bypassed())

	require.NoError(t, srv.Reload(base))
	sel = pick()
	require.False(t, sel.Bypass)
	require.True(t, sel.HasPrefill)
	require.Equal(t, 1.0, unavailable(), "the load-based picker is back: no KV result")
	require.Equal(t, 1.0, bypassed())
	eventually(t, "the kv-events subscriptions to stop", func() bool { return len(srv.kvSubs.Subscriptions()) == 0 })
	require.Len(t, srv.loadSubs.Subscriptions(), 0, "no kv_metrics channel was advertised")
}

// While recording, a reload that turns KV-aware selection on reaches the
// core as a recorded configuration change: the picks before and after it
// are recorded, and a replay applies the change where it happened and
// makes both picks again, each under its own picker.
func TestKVReloadKeepsRecording(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reload.db")
	cfg := embeddedConfig("tok")
	w := createRecording(t, path, cfg, 9)
	logs := &logCapture{}
	srv, err := NewWithOptions(cfg, slog.New(logs), Options{Recorder: w, Seed: 9})
	require.NoError(t, err)
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	reg, err := registrar.Register(context.Background(), cli, registrar.Worker{
		Namespace: "dynamo", Component: "backend", WorkerType: "aggregated", Model: "m", BlockSize: 16,
		TotalKVBlocks: 64, MaxNumBatchedTokens: 512, MaxNumSeqs: 4, ContextLength: 1024, Transport: "127.0.0.1:9/x",
	}, 5, nil)
	require.NoError(t, err)
	eventually(t, "the worker with its card", func() bool {
		s := srv.Discovery().Snapshot()
		return len(s.Workers) == 1 && s.Workers[0].Model == "m"
	})
	pick := func(id uint64) {
		t.Helper()
		_, ok := srv.core.Pick(picker.Request{ID: id, Model: "m", Namespaces: []string{"dynamo"}, PromptTokens: 10,
			Now: time.Now()})
		require.True(t, ok)
	}
	pick(1)
	on := embeddedConfig("tok")
	on.Dynamo.KV.Enabled = true
	require.NoError(t, srv.Reload(on))
	pick(2)
	require.Equal(t, 1.0, testutil.ToFloat64(srv.metrics.KV.Selection.WithLabelValues(picker.KVTokenizerUnavailable)))

	reg.Kill()
	cli.Close()
	srv.Close()
	_, err = w.Close()
	require.NoError(t, err)
	rd, err := recorder.Open(path)
	require.NoError(t, err)
	defer rd.Close()
	runs, err := rd.Runs()
	require.NoError(t, err)
	require.Equal(t, picker.NameLoad, runs[0].Picker, "the picker the process started with")
	var selected, reasons []string
	var changes []recorder.ConfigChanged
	require.NoError(t, rd.Entries(runs[0].ID, func(e recorder.Entry) error {
		switch v := e.Value.(type) {
		case recorder.Selection:
			selected = append(selected, fmt.Sprint(v.RequestID))
			reasons = append(reasons, v.Sel.DecodeReason)
		case recorder.ConfigChanged:
			selected = append(selected, "config")
			changes = append(changes, v)
		}
		return nil
	}))
	require.Equal(t, []string{"config", "1", "config", "2"}, selected, "the starting settings, then the reload")
	require.Equal(t, picker.NameLoad, changes[0].Picker)
	require.Equal(t, picker.NameKV, changes[1].Picker)
	require.Equal(t, picker.ReasonKVAware, reasons[1], "the second pick was the KV-aware picker's")
	rep, err := replay.Run(rd, 0, "")
	require.NoError(t, err)
	require.Equal(t, 2, rep.Selections)
	require.True(t, rep.Exact(), "divergences: %+v", rep.Divergences)
}

// Gap recovery live: the fake engine workers keep their kv-events for
// replay and advertise their replay sockets in discovery; a drop fault
// loses messages on the way. With dynamo.kv.replay on, the router asks
// the publisher for what it missed over the DEALER client and the index
// never clears a rank; with it off the same loss shows as a gap.
func TestKVGapRecoveredByReplay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		replay bool
	}{{"replay", true}, {"no replay", false}} {
		t.Run(tc.name, func(t *testing.T) {
			k := startKVStack(t, fleet.Spec{Prefill: 1, Decode: 1}, func(cfg *config.Config) Options {
				cfg.Dynamo.KV.Replay.Enabled = tc.replay
				return Options{}
			})
			srv := k.srv
			for _, s := range srv.kvSubs.Subscriptions() {
				require.True(t, s.Replay, "publisher %d advertises its replay socket", s.PublisherID)
			}
			k.chat(t, strings.Repeat("warm the caches up with a prompt of several blocks; ", 16))
			eventually(t, "the first blocks indexed for both workers", func() bool {
				held := 0
				for _, n := range blocksByWorker(srv.core.Tracker()) {
					held += min(n, 1)
				}
				return held == 2
			})
			for _, w := range srv.Discovery().Snapshot().Workers {
				require.NoError(t, k.fl.Drop(w.InstanceID, 2))
			}
			// Every request stores new blocks: the drops are used up and
			// the messages after them reveal the gap.
			gapSeen := func() bool {
				return metricValue(t, srv, `switchyard_dynamo_kv_replay_total{result="recovered"}`) >= 2 ||
					metricValue(t, srv, `switchyard_dynamo_kv_events_total{result="gap"}`) > 0
			}
			for i := 0; !gapSeen(); i++ {
				require.Less(t, i, 200, "no gap after 200 requests")
				k.chat(t, strings.Repeat(fmt.Sprintf("request %d asks about something new; ", i), 16))
			}
			if tc.replay {
				eventually(t, "every dropped message recovered", func() bool {
					return metricValue(t, srv, `switchyard_dynamo_kv_replay_total{result="recovered"}`) >= 2 &&
						metricValue(t, srv, `switchyard_dynamo_kv_replay_fetches_total{result="stopped"}`)+
							metricValue(t, srv, `switchyard_dynamo_kv_replay_fetches_total{result="ended"}`) >= 1
				})
				require.Zero(t, metricValue(t, srv, `switchyard_dynamo_kv_events_total{result="gap"}`), "no rank cleared")
				require.Zero(t, metricValue(t, srv, `switchyard_dynamo_kv_replay_total{result="lost"}`))
			} else {
				require.Zero(t, metricValue(t, srv, `switchyard_dynamo_kv_replay_total{result="requested"}`))
				require.Positive(t, metricValue(t, srv, `switchyard_dynamo_kv_events_total{result="gap"}`))
			}
		})
	}
}
