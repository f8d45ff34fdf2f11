package server

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/fleet"
	"switchyard/router/admin"
	"switchyard/router/bus/broker"
	"switchyard/router/bus/kvlistener"
	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/events"
	"switchyard/router/kv"
	"switchyard/router/kvsource"
)

// kvListenerProc is an in-process switchyard kv-listener: its replay
// rings, its kv-events subscriptions to the workers, and its event-bus
// agent dialing the router. Its subscriptions follow the router's own
// registry, which the same etcd fills as the listener's discovery would.
type kvListenerProc struct {
	l                 *kvlistener.Listener
	reg               *discovery.Registry
	busAddr           string
	roots             *x509.CertPool
	follow, agent     context.CancelFunc
	followWG, agentWG sync.WaitGroup
}

func startKVListenerProc(t *testing.T, reg *discovery.Registry, busAddr string, roots *x509.CertPool, firstID uint64) *kvListenerProc {
	t.Helper()
	l, err := kvlistener.New(kvlistener.Config{Backends: []kvlistener.Backend{{Name: "vllm-1", Namespace: "dynamo"}}, FirstID: firstID})
	require.NoError(t, err)
	p := &kvListenerProc{l: l, reg: reg, busAddr: busAddr, roots: roots}
	ctx, cancel := context.WithCancel(context.Background())
	p.follow = cancel
	sup := l.Subscriptions(clock.Real{}, slog.New(slog.DiscardHandler), nil)
	p.followWG.Add(1)
	go func() { defer p.followWG.Done(); l.Follow(ctx, reg, sup) }()
	p.startAgent(t)
	t.Cleanup(p.stop)
	return p
}

// startAgent dials the router: a new session for the same rings.
func (p *kvListenerProc) startAgent(t *testing.T) {
	t.Helper()
	agent, err := broker.New(broker.Config{BusURL: "https://" + p.busAddr, ClientID: "kv-listener-a",
		Token: func() (string, error) { return "listener-token", nil }, TLS: &tls.Config{RootCAs: p.roots},
		Sources: p.l.Backends(), Serve: p.l.Serve, Metrics: broker.NewMetricsFor("kv_listener")})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	p.agent = cancel
	p.agentWG.Add(1)
	go func() { defer p.agentWG.Done(); agent.Run(ctx) }()
}

// stopAgent drains the session (SIGTERM's path); the rings stay.
func (p *kvListenerProc) stopAgent() { p.agent(); p.agentWG.Wait() }

// stop ends the session and the subscriptions: the process is gone.
func (p *kvListenerProc) stop() { p.stopAgent(); p.follow(); p.followWG.Wait() }

// directIndex is a KV index fed by direct kv-events subscriptions to the
// same workers: the state the router would reach without the listener.
func directIndex(t *testing.T, reg *discovery.Registry) *kv.Tracker {
	tr := kv.NewTracker(nil)
	sink := trackerSink{tr}
	sup := eventplane.NewSupervisor(eventplane.Family{Topic: discovery.TopicKVEvents, Limits: envelope.KVEventLimits, Sink: sink},
		eventplane.Policy{Transport: config.TransportDirect, Dialer: &eventplane.Dialer{}}, clock.Real{}, slog.New(slog.DiscardHandler), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer sup.Stop()
		for {
			changed := reg.Changed()
			snap := reg.Snapshot()
			tr.SetLive(snap)
			sup.Reconcile(snap)
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return tr
}

type trackerSink struct{ tr *kv.Tracker }

func (s trackerSink) Deliver(ns string, pub uint64, frames [][]byte, at time.Time) {
	s.tr.Apply(&events.KVMessage{At: at, Namespace: ns, PublisherID: pub, Frames: frames})
}
func (trackerSink) Subscribed(string, uint64, time.Time)   {}
func (trackerSink) Connected(string, uint64, time.Time)    {}
func (trackerSink) Disconnected(string, uint64, time.Time) {}
func (trackerSink) Unsubscribed(string, uint64, time.Time) {}

func totalBlocks(tr *kv.Tracker) int {
	n := 0
	for _, b := range blocksByWorker(tr) {
		n += b
	}
	return n
}

// The kv_listener push role end to end: a router whose dynamo.kv.sources
// names a backend followed through its real TLS event-bus listener, fake
// engine workers publishing kv-events over real ZMQ, and a kv-listener
// relaying them as SSE. The router's index reaches the state a direct
// subscription reaches; a listener whose session drops keeps its ring and
// the router resumes from its last id without loss; a listener restarted
// without the events after that id answers with a reset, which clears the
// backend's ranks.
func TestKVSourceThroughKVListenerEndToEnd(t *testing.T) {
	fe, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	cfg := kvFleetConfig(t, fe.Addr())
	certFile, keyFile, roots := busCerts(t)
	sum := sha256.Sum256([]byte("listener-token"))
	cfg.Dynamo.EventBus.Enabled = true
	cfg.Dynamo.EventBus.Listen = freeAddr(t)
	cfg.Dynamo.EventBus.TLS = config.BusTLS{Cert: certFile, Key: keyFile}
	cfg.Dynamo.EventBus.Brokers = []config.BusClient{{ID: "kv-listener-a", Role: config.BusRoleKVListener,
		TokenHash: "sha256:" + hex.EncodeToString(sum[:]), Backends: []string{"vllm-1"}}}
	cfg.Dynamo.KV.Sources = []config.KVSource{{Backend: "vllm-1", Transport: config.KVSourceTransportEventBus, Namespace: "dynamo"}}
	srv, err := New(cfg, log)
	require.NoError(t, err)
	var closers []func()
	t.Cleanup(func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
		srv.Close()
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	closers = append(closers, func() { cli.Close() })
	spec := fleet.Spec{Prefill: 1, Decode: 2, Model: kvModel, SpeedupRatio: 200, LeaseTTL: 2, Engine: true}
	fl, err := fleet.Start(context.Background(), cli, spec, log)
	require.NoError(t, err)
	closers = append(closers, fl.Close)
	hs := &http.Server{Handler: fl.Handler(log), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(fe)
	closers = append(closers, func() { hs.Close() })
	k := &kvStack{srv: srv, fl: fl}

	reg := srv.Registry()
	eventually(t, "the fleet with its kv-events channels", func() bool {
		return reg.Snapshot().CountPublishers(discovery.TopicKVEvents) == 3
	})
	require.Empty(t, srv.kvSubs.Subscriptions(), "the source's namespace is not dialed directly")
	direct := directIndex(t, reg)

	firstID := uint64(time.Now().UnixMicro())
	lp := startKVListenerProc(t, reg, cfg.Dynamo.EventBus.Listen, roots, firstID)
	eventually(t, "the source's stream", func() bool {
		st := srv.KVSources()
		return len(st) == 1 && st[0].Connected
	})
	same := func(what string) {
		t.Helper()
		ok := false
		for deadline := time.Now().Add(30 * time.Second); !ok && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			ok = totalBlocks(direct) > 0 && fmt.Sprint(blocksByWorker(direct)) == fmt.Sprint(blocksByWorker(srv.KV()))
		}
		require.True(t, ok, "%s: direct %v, router %v, sources %+v", what, blocksByWorker(direct), blocksByWorker(srv.KV()), srv.KVSources())
	}
	for i := range 4 {
		k.chat(t, fmt.Sprintf("conversation %d: %s", i, longPrompt(i)))
	}
	same("the router's index matches the direct subscription's")
	lastBefore := srv.KVSources()[0].LastEventID
	// The admin listing shows the source, where it would resume, and
	// nothing of the listener's address.
	code, raw := get(t, "http://"+srv.Addr()+"/admin/dynamo/workers", "tok")
	require.Equal(t, http.StatusOK, code)
	var listing admin.WorkersResponse
	require.NoError(t, json.Unmarshal(raw, &listing))
	require.Len(t, listing.KVSources, 1)
	ls := listing.KVSources[0]
	require.Equal(t, []any{"vllm-1", "dynamo", true, 3}, []any{ls.Backend, ls.Namespace, ls.Connected, ls.Workers})
	listed, err := strconv.ParseUint(ls.LastEventID, 10, 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, listed, lastBefore)
	require.NotContains(t, string(raw), cfg.Dynamo.EventBus.Listen)
	require.Greater(t, lastBefore, firstID-1, "%+v direct %v router %v", srv.KVSources(), blocksByWorker(direct), blocksByWorker(srv.KV()))

	// The session drops (the listener drains); the ring lives on in the
	// listener. Events while no session is up are replayed after the
	// router's last id: nothing is lost.
	lp.stopAgent()
	eventually(t, "the stream gone", func() bool { return !srv.KVSources()[0].Connected })
	for i := range 3 {
		k.chat(t, fmt.Sprintf("while the listener is away %d: %s", i, longPrompt(i+4)))
	}
	eventually(t, "the direct index moved on", func() bool { return totalBlocks(direct) > totalBlocks(srv.KV()) })
	lp.startAgent(t)
	same("the resumed stream caught up without loss")
	require.Zero(t, testutil.ToFloat64(srv.kvSources.Metrics().Resets.WithLabelValues(kvsource.CauseReset)))
	lp.stop()

	// A listener restarted without the events after the router's last id
	// (a new ring, numbered from its own start) answers with a reset: the
	// backend's ranks are cleared, as a gap clears them.
	startKVListenerProc(t, reg, cfg.Dynamo.EventBus.Listen, roots, uint64(time.Now().UnixMicro())+1_000_000)
	eventually(t, "a reset cleared the backend's ranks", func() bool {
		return testutil.ToFloat64(srv.kvSources.Metrics().Resets.WithLabelValues(kvsource.CauseReset)) == 1 &&
			totalBlocks(srv.KV()) == 0
	})
	require.Positive(t, totalBlocks(direct))
	// Events after the reset are applied again.
	k.chat(t, "after the reset: "+longPrompt(9))
	eventually(t, "new events after the reset", func() bool { return totalBlocks(srv.KV()) > 0 })
}
