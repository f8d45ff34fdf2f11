package server

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/registrar"
	"switchyard/fakefleet/wire"
	"switchyard/recorder"
	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/core"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource"
	"switchyard/router/discoverysource/etcdsource"
	"switchyard/router/events"
	"switchyard/router/metrics"
	"switchyard/router/picker"
	"switchyard/sim/replay"
)

// scriptedSource is a discovery source that delivers the batches a test
// hands it from its own goroutine, as the etcd watcher does.
type scriptedSource struct {
	sink    etcdsource.Sink
	batches chan []events.Event
	applied chan struct{}
}

func (s *scriptedSource) Run(ctx context.Context) error {
	for {
		select {
		case b := <-s.batches:
			s.sink.Apply(b)
			s.applied <- struct{}{}
		case <-ctx.Done():
			return nil
		}
	}
}

// testWorker is one worker's discovery records and load publisher.
type testWorker struct {
	id   uint64
	rec  registrar.Worker
	pid  atomic.Uint64
	seq  uint64
	role string
}

func newTestWorker(id uint64, role string) *testWorker {
	w := &testWorker{id: id, role: role}
	w.rec = registrar.Worker{Namespace: "dynamo", Component: role, WorkerType: role, Model: "m", BlockSize: 16,
		TotalKVBlocks: 1000, MaxNumBatchedTokens: 4096, MaxNumSeqs: 64, ContextLength: 8192, Transport: "127.0.0.1:9/x"}
	w.setPublisher(id*1000 + 1)
	return w
}

func (w *testWorker) setPublisher(pid uint64) {
	w.pid.Store(pid)
	w.rec.Channels = []registrar.Channel{{Topic: discovery.TopicLoad, PublisherID: pid, Endpoint: "tcp://127.0.0.1:9"}}
}

// kvs are the worker's records as discovery puts, in key order.
func (w *testWorker) puts(at time.Time) []events.Event {
	recs := registrar.Records(w.rec, w.id)
	keys := make([]string, 0, len(recs))
	for k := range recs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []events.Event
	for _, k := range keys {
		ks := events.EventChannels
		switch {
		case strings.HasPrefix(k, "v1/instances/"):
			ks = events.Instances
		case strings.HasPrefix(k, "v1/mdc/"):
			ks = events.Models
		}
		out = append(out, events.DiscoveryPut{At: at, Namespace: "dynamo", DiscoveryRecord: events.DiscoveryRecord{Keyspace: ks, Key: k, Value: recs[k]}})
	}
	return out
}

func (w *testWorker) deletes(at time.Time) []events.Event {
	var out []events.Event
	for _, ev := range w.puts(at) {
		p := ev.(events.DiscoveryPut)
		out = append(out, events.DiscoveryDelete{At: at, Namespace: "dynamo", Keyspace: p.Keyspace, Key: p.Key})
	}
	return out
}

// newSharedCore is the live server's routing core, recording to w when it
// is set.
func newSharedCore(t testing.TB, w *recorder.Writer) *core.Shared {
	var port core.Port
	if w != nil {
		port = w
	}
	c, err := core.New(core.Options{Picker: picker.NameLoad, Port: port})
	require.NoError(t, err)
	return core.NewShared(c, clock.Real{})
}

// Many goroutines pick and end requests while others deliver kv_metrics
// messages, reconnect subscriptions and change the fleet, all through the
// live server's code path (the discovery supervisor, the subscriptions'
// sink, the gateway's Pinner: one core behind one lock), with the race
// detector watching. A fresh core fed the recording (replay) then makes
// every selection again, and reads every load message and publish alike;
// and the recorded inputs fed once more through the live path, with and
// without a recording attached, make the same selections too.
func TestRecordingUnderConcurrencyReplaysExactly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "concurrent.db")
	w, err := recorder.Create(path, recorder.Run{Kind: "live", Version: "test", Picker: picker.NameLoad, Start: time.Now()}, recorder.Options{})
	require.NoError(t, err)

	shared := newSharedCore(t, w)
	reg := shared.Registry()
	src := &scriptedSource{batches: make(chan []events.Event), applied: make(chan struct{})}
	sup := discoverysource.New(shared, clock.Real{}, slog.New(slog.DiscardHandler), &metrics.New().Discovery,
		func(_ *config.Config, sink etcdsource.Sink, _ func(string)) discoverysource.Runner {
			src.sink = sink
			return src
		})
	cfg := config.Default()
	cfg.Dynamo.Enabled = true
	sup.Apply(cfg)
	defer sup.Stop()
	discover := func(batch []events.Event) {
		src.batches <- batch
		<-src.applied
	}
	sink := loadSink{shared}

	workers := []*testWorker{newTestWorker(0x11, "prefill"), newTestWorker(0x12, "prefill"),
		newTestWorker(0x21, "decode"), newTestWorker(0x22, "decode")}
	var first []events.Event
	for _, tw := range workers {
		first = append(first, tw.puts(time.Now())...)
	}
	discover(first)
	require.Len(t, reg.Snapshot().Workers, 4)

	const pickers, rounds = 4, 9
	var wg sync.WaitGroup
	var picks, ended, okPicks, messages atomic.Int64
	var ids atomic.Uint64
	stop := make(chan struct{})
	// One loader per worker, as one subscription per publisher delivers.
	for i, tw := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for n := 0; !closed(stop); n++ {
				pid := tw.pid.Load()
				if n%60 == 0 {
					sink.Connected("dynamo", pid, time.Now())
				}
				tw.seq++
				if rng.IntN(40) == 0 {
					tw.seq++ // a gap: the store drops what it held
				}
				a := wire.ActiveLoad{WorkerID: tw.id, KVUsedBlocks: wire.U64(rng.Uint64N(900)),
					ActiveDecodeBlocks: wire.U64(rng.Uint64N(300)), ActivePrefillTokens: wire.U64(rng.Uint64N(3000))}
				at := time.Now()
				sink.Deliver("dynamo", pid, wire.LoadMessage(pid, tw.seq, a, at), at)
				messages.Add(1)
				if n%8 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	for i := range pickers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			for n := 0; !closed(stop); n++ {
				req := picker.Request{ID: ids.Add(1), Model: "m", Namespaces: []string{"dynamo"},
					PromptTokens: 16 + rng.Uint64N(4000), Now: time.Now(), Route: "/v1/chat/completions"}
				sel, ok := shared.Pick(req)
				picks.Add(1)
				if ok {
					okPicks.Add(1)
					if rng.IntN(4) == 0 {
						shared.Ended(req, sel)
						ended.Add(1)
					}
				}
				if n%10 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	// The fleet changes meanwhile: a decode worker leaves and comes back,
	// a prefill worker's publisher restarts under a new id. Picks and
	// messages go on until the last change.
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(stop)
		for round := 0; round < rounds; round++ {
			time.Sleep(25 * time.Millisecond)
			switch round % 3 {
			case 0:
				discover(workers[3].deletes(time.Now()))
			case 1:
				discover(workers[3].puts(time.Now()))
			case 2:
				pw := workers[round%2]
				old := pw.deletes(time.Now())
				pw.setPublisher(pw.pid.Load() + 1)
				// The old channel record goes and the new one comes in one batch.
				var batch []events.Event
				for _, ev := range old {
					if ev.(events.DiscoveryDelete).Keyspace == events.EventChannels {
						batch = append(batch, ev)
					}
				}
				discover(append(batch, pw.puts(time.Now())...))
			}
		}
	}()
	wg.Wait()

	shared.SetPort(nil)
	sup.Stop()
	st, err := w.Close()
	require.NoError(t, err)
	for table, n := range st.Dropped {
		require.Zero(t, n, "dropped %s records", table)
	}
	require.Equal(t, uint64(picks.Load()), st.Written["requests"])
	require.Equal(t, uint64(picks.Load()), st.Written["selections"])
	require.Equal(t, uint64(ended.Load()), st.Written["ended"])
	require.Equal(t, uint64(messages.Load()), loadMessages(t, path))
	require.GreaterOrEqual(t, st.Written["published"], uint64(rounds), "every fleet change was published")
	t.Logf("%d picks (%d ended), %d load messages, %d publishes", picks.Load(), ended.Load(), messages.Load(), st.Written["published"])

	rd, err := recorder.Open(path)
	require.NoError(t, err)
	defer rd.Close()
	rep, err := replay.Run(rd, 0, "")
	require.NoError(t, err)
	require.Equal(t, int(picks.Load()), rep.Selections)
	require.Zero(t, rep.GenerationMismatches)
	require.Zero(t, rep.LoadResultMismatches)
	require.True(t, rep.Exact(), "divergences: %+v", rep.Divergences)

	// The picks depended on the load: most were costed, and they spread.
	reasons, pinned := map[string]int{}, map[uint64]bool{}
	var recorded []picker.Selection
	require.NoError(t, rd.Entries(rep.RunID, func(e recorder.Entry) error {
		if s, ok := e.Value.(recorder.Selection); ok {
			recorded = append(recorded, s.Sel)
			if s.OK {
				reasons[s.Sel.DecodeReason]++
				pinned[s.Sel.Decode.WorkerID] = true
				require.NotEmpty(t, s.Candidates, "each pick lists its candidates")
			}
		}
		return nil
	}))
	require.Greater(t, reasons[picker.ReasonLoad], int(okPicks.Load())/2, "reasons: %v", reasons)
	require.Len(t, pinned, 2, "both decode workers were chosen")

	// The same inputs through the live path, recorded again or not.
	again := filepath.Join(t.TempDir(), "again.db")
	w2, err := recorder.Create(again, recorder.Run{Kind: "live", Version: "test", Picker: picker.NameLoad, Start: time.Now()}, recorder.Options{})
	require.NoError(t, err)
	for _, rec := range []*recorder.Writer{nil, w2} {
		got := feedLivePath(t, rd, rep.RunID, newSharedCore(t, rec))
		require.Equal(t, recorded, got, "recording attached: %v", rec != nil)
	}
	_, err = w2.Close()
	require.NoError(t, err)
}

// feedLivePath hands a recorded run's inputs to a live core through the
// live server's adapters (discovery batches up to each publish, the
// subscriptions' sink, the gateway's Pinner) and returns its selections.
func feedLivePath(t *testing.T, rd *recorder.Reader, runID int64, shared *core.Shared) []picker.Selection {
	var batch []events.Event
	flush := func() {
		shared.Discovery(batch)
		batch = nil
	}
	sink := loadSink{shared}
	reqs := map[uint64]picker.Request{}
	sels := map[uint64]picker.Selection{}
	var out []picker.Selection
	require.NoError(t, rd.Entries(runID, func(e recorder.Entry) error {
		switch v := e.Value.(type) {
		case events.DiscoveryPut, events.DiscoveryDelete, events.DiscoveryResync, events.DiscoveryPrune, events.DiscoveryReset:
			batch = append(batch, v.(events.Event))
			return nil
		case recorder.Published:
			flush()
			return nil
		}
		if len(batch) > 0 {
			flush()
		}
		switch v := e.Value.(type) {
		case events.LoadConnected:
			sink.Connected(v.Namespace, v.PublisherID, v.At)
		case recorder.LoadMessage:
			sink.Deliver(v.Namespace, v.PublisherID, v.Frames, v.At)
		case recorder.Request:
			req := picker.Request{ID: v.RequestID, Model: v.Model, Namespaces: v.Namespaces, PromptTokens: v.PromptTokens,
				MaxTokens: v.MaxTokens, Route: v.Route, Now: v.At}
			sel, _ := shared.Pick(req)
			reqs[v.RequestID], sels[v.RequestID] = req, sel
			// Dispatch details recordings do not keep.
			sel.PromptBlocks, sel.CachedTokens, sel.BlockSize = 0, 0, 0
			out = append(out, sel)
		case recorder.Ended:
			shared.Ended(reqs[v.RequestID], sels[v.RequestID])
		}
		return nil
	}))
	return out
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// loadMessages counts the recorded kv_metrics messages (not reconnects).
func loadMessages(t *testing.T, path string) uint64 {
	rd, err := recorder.Open(path)
	require.NoError(t, err)
	defer rd.Close()
	runs, err := rd.Runs()
	require.NoError(t, err)
	var n uint64
	require.NoError(t, rd.Entries(runs[len(runs)-1].ID, func(e recorder.Entry) error {
		if _, ok := e.Value.(recorder.LoadMessage); ok {
			n++
		}
		return nil
	}))
	return n
}

// benchCore is a four-worker fleet with fresh samples in the live
// server's core, recorded to w when it is set.
func benchCore(b *testing.B, w *recorder.Writer) (*core.Shared, []*testWorker) {
	var port core.Port
	if w != nil {
		port = w
	}
	c, workers := benchFleet(b, port)
	return core.NewShared(c, clock.Real{}), workers
}

// benchFleet is the same fleet in a bare core.
func benchFleet(b *testing.B, port core.Port) (*core.Core, []*testWorker) {
	c, err := core.New(core.Options{Picker: picker.NameLoad, Port: port})
	require.NoError(b, err)
	workers := []*testWorker{newTestWorker(0x11, "prefill"), newTestWorker(0x12, "prefill"),
		newTestWorker(0x21, "decode"), newTestWorker(0x22, "decode")}
	var batch []events.Event
	for _, tw := range workers {
		batch = append(batch, tw.puts(time.Now())...)
	}
	c.Discovery(batch)
	for _, tw := range workers {
		tw.seq++
		c.LoadMessage(&events.LoadMessage{At: time.Now(), Namespace: "dynamo", PublisherID: tw.pid.Load(),
			Frames: wire.LoadMessage(tw.pid.Load(), tw.seq, wire.ActiveLoad{WorkerID: tw.id, KVUsedBlocks: wire.U64(10)}, time.Now())})
	}
	return c, workers
}

func benchWriter(b *testing.B) *recorder.Writer {
	w, err := recorder.Create(filepath.Join(b.TempDir(), "bench.db"), recorder.Run{Kind: "live", Picker: "load", Start: time.Now()}, recorder.Options{})
	require.NoError(b, err)
	b.Cleanup(func() { _, _ = w.Close() })
	return w
}

// What recording adds to one kv_metrics message and one pick through the
// live server's core (the figures in docs/recording.md).
func BenchmarkRecordingOverhead(b *testing.B) {
	for _, recorded := range []bool{false, true} {
		var w *recorder.Writer
		name := "off"
		if recorded {
			name = "on"
		}
		b.Run("deliver/"+name, func(b *testing.B) {
			if recorded {
				w = benchWriter(b)
			}
			shared, workers := benchCore(b, w)
			tw := workers[2]
			pid := tw.pid.Load()
			frames := make([][][]byte, 1024)
			for i := range frames {
				frames[i] = wire.LoadMessage(pid, tw.seq+uint64(i)+1, wire.ActiveLoad{WorkerID: tw.id, KVUsedBlocks: wire.U64(uint64(i))}, time.Now())
			}
			sink := loadSink{shared}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%len(frames) == 0 && i > 0 {
					b.StopTimer()
					sink.Connected("dynamo", pid, time.Now()) // restart the sequence
					b.StartTimer()
				}
				sink.Deliver("dynamo", pid, frames[i%len(frames)], time.Now())
			}
		})
		b.Run("pick/"+name, func(b *testing.B) {
			if recorded {
				w = benchWriter(b)
			}
			shared, _ := benchCore(b, w)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req := picker.Request{ID: uint64(i) + 1, Model: "m", Namespaces: []string{"dynamo"}, PromptTokens: 512, Now: time.Now()}
				if _, ok := shared.Pick(req); !ok {
					b.Fatal("no pick")
				}
			}
		})
	}
}

// What the core's one lock costs a pick: the same pick on the bare core
// (one goroutine, no lock), through the lock alone, and through the lock
// while another goroutine delivers kv_metrics messages as fast as it can
// (the figures in docs/benchmarks.md).
func BenchmarkCoreLock(b *testing.B) {
	pick := func(i int) picker.Request {
		return picker.Request{ID: uint64(i) + 1, Model: "m", Namespaces: []string{"dynamo"}, PromptTokens: 512, Now: time.Now()}
	}
	b.Run("bare", func(b *testing.B) {
		c, _ := benchFleet(b, nil)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, ok := c.Pick(core.Arrival{Req: pick(i)}); !ok {
				b.Fatal("no pick")
			}
		}
	})
	for _, loaded := range []bool{false, true} {
		name := "locked"
		if loaded {
			name = "locked-under-messages"
		}
		b.Run(name, func(b *testing.B) {
			shared, workers := benchCore(b, nil)
			done := make(chan struct{})
			var delivered atomic.Int64
			var wg sync.WaitGroup
			if loaded {
				tw := workers[2]
				pid := tw.pid.Load()
				frames := make([][][]byte, 1024)
				for i := range frames {
					frames[i] = wire.LoadMessage(pid, tw.seq+uint64(i)+1, wire.ActiveLoad{WorkerID: tw.id, KVUsedBlocks: wire.U64(uint64(i))}, time.Now())
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					sink := loadSink{shared}
					for i := 0; !closed(done); i++ {
						if i%len(frames) == 0 {
							sink.Connected("dynamo", pid, time.Now())
						}
						sink.Deliver("dynamo", pid, frames[i%len(frames)], time.Now())
						delivered.Add(1)
					}
				}()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, ok := shared.Pick(pick(i)); !ok {
					b.Fatal("no pick")
				}
			}
			b.StopTimer()
			close(done)
			wg.Wait()
			if loaded {
				b.ReportMetric(float64(delivered.Load())/b.Elapsed().Seconds(), "msgs/s")
			}
		})
	}
}
