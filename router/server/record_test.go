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
	"switchyard/router/discovery"
	"switchyard/router/discoverysource"
	"switchyard/router/discoverysource/etcdsource"
	"switchyard/router/events"
	"switchyard/router/kv"
	"switchyard/router/load"
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

// Many goroutines pick and end requests while others deliver kv_metrics
// messages, reconnect subscriptions and change the fleet, all through the
// recording's order lock, with the race detector watching. A fresh core
// fed the recording then makes every selection again, and reads every
// load message and publish alike.
func TestRecordingUnderConcurrencyReplaysExactly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "concurrent.db")
	w, err := recorder.Create(path, recorder.Run{Kind: "live", Version: "test", Picker: picker.NameLoad, Start: time.Now()}, recorder.Options{})
	require.NoError(t, err)

	reg := discovery.NewRegistry()
	store := load.NewStore(nil)
	rec := newRecording(w, reg, store, kv.NewTracker(nil), clock.Real{})
	src := &scriptedSource{batches: make(chan []events.Event), applied: make(chan struct{})}
	sup := discoverysource.New(reg, clock.Real{}, slog.New(slog.DiscardHandler), &metrics.New().Discovery,
		func(_ *config.Config, sink etcdsource.Sink, _ func(string)) discoverysource.Runner {
			src.sink = sink
			return src
		})
	sup.SetRecording(rec.discovery())
	cfg := config.Default()
	cfg.Dynamo.Enabled = true
	sup.Apply(cfg)
	defer sup.Stop()
	discover := func(batch []events.Event) {
		src.batches <- batch
		<-src.applied
	}

	holder := picker.NewHolder(picker.NewLoad(store, nil))
	holder.Wrap(rec.wrap)
	sink := rec.sink()

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
				p := holder.Get()
				req := picker.Request{ID: ids.Add(1), Model: "m", Namespaces: []string{"dynamo"},
					PromptTokens: 16 + rng.Uint64N(4000), Now: time.Now(), Route: "/v1/chat/completions"}
				sel, ok := p.Pick(req, reg.Snapshot())
				picks.Add(1)
				if ok {
					okPicks.Add(1)
					if rng.IntN(4) == 0 {
						p.Ended(req, sel)
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

	rec.stop()
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
	require.NoError(t, rd.Entries(rep.RunID, func(e recorder.Entry) error {
		if s, ok := e.Value.(recorder.Selection); ok && s.OK {
			reasons[s.Sel.DecodeReason]++
			pinned[s.Sel.Decode.WorkerID] = true
			require.NotEmpty(t, s.Candidates, "each pick lists its candidates")
		}
		return nil
	}))
	require.Greater(t, reasons[picker.ReasonLoad], int(okPicks.Load())/2, "reasons: %v", reasons)
	require.Len(t, pinned, 2, "both decode workers were chosen")
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

// benchCore is a four-worker fleet with fresh samples, recorded to w
// when it is set.
func benchCore(b *testing.B, w *recorder.Writer) (*recording, *load.Store, picker.Picker, *discovery.Snapshot, []*testWorker) {
	reg := discovery.NewRegistry()
	red := discovery.NewReducer(nil, nil)
	workers := []*testWorker{newTestWorker(0x11, "prefill"), newTestWorker(0x12, "prefill"),
		newTestWorker(0x21, "decode"), newTestWorker(0x22, "decode")}
	for _, tw := range workers {
		for _, ev := range tw.puts(time.Now()) {
			red.Apply(ev)
		}
	}
	reg.Publish(red.View(), time.Now())
	store := load.NewStore(nil)
	store.SetLive(reg.Snapshot())
	var p picker.Picker = picker.NewLoad(store, nil)
	rec := newRecording(w, reg, store, kv.NewTracker(nil), clock.Real{})
	if w != nil {
		p = rec.wrap(p)
	}
	for _, tw := range workers {
		tw.seq++
		store.Apply(&events.LoadMessage{At: time.Now(), Namespace: "dynamo", PublisherID: tw.pid.Load(),
			Frames: wire.LoadMessage(tw.pid.Load(), tw.seq, wire.ActiveLoad{WorkerID: tw.id, KVUsedBlocks: wire.U64(10)}, time.Now())})
	}
	return rec, store, p, reg.Snapshot(), workers
}

func benchWriter(b *testing.B) *recorder.Writer {
	w, err := recorder.Create(filepath.Join(b.TempDir(), "bench.db"), recorder.Run{Kind: "live", Picker: "load", Start: time.Now()}, recorder.Options{})
	require.NoError(b, err)
	b.Cleanup(func() { _, _ = w.Close() })
	return w
}

// What recording adds to one kv_metrics message and one pick (the
// figures in docs/recording.md).
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
			rec, store, _, _, workers := benchCore(b, w)
			tw := workers[2]
			pid := tw.pid.Load()
			frames := make([][][]byte, 1024)
			for i := range frames {
				frames[i] = wire.LoadMessage(pid, tw.seq+uint64(i)+1, wire.ActiveLoad{WorkerID: tw.id, KVUsedBlocks: wire.U64(uint64(i))}, time.Now())
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%len(frames) == 0 && i > 0 {
					b.StopTimer()
					store.Connected(events.LoadConnected{Namespace: "dynamo", PublisherID: pid}) // restart the sequence
					b.StartTimer()
				}
				f := frames[i%len(frames)]
				if recorded {
					rec.sink().Deliver("dynamo", pid, f, time.Now())
				} else {
					load.Subscriber{Store: store}.Deliver("dynamo", pid, f, time.Now())
				}
			}
		})
		b.Run("pick/"+name, func(b *testing.B) {
			if recorded {
				w = benchWriter(b)
			}
			_, _, p, snap, _ := benchCore(b, w)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req := picker.Request{ID: uint64(i) + 1, Model: "m", Namespaces: []string{"dynamo"}, PromptTokens: 512, Now: time.Now()}
				if _, ok := p.Pick(req, snap); !ok {
					b.Fatal("no pick")
				}
			}
		})
	}
}
