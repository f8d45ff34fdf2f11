package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"switchyard/fakefleet/publish"
	"switchyard/fakefleet/registrar"
	"switchyard/fakefleet/wire"
	"switchyard/internal/etcdtest"
	"switchyard/internal/extproctest"
	"switchyard/internal/syncbuf"
	"switchyard/internal/testpki"
	"switchyard/router/config"
	"switchyard/router/kv"
	"switchyard/router/load"
	"switchyard/router/picker"
	"switchyard/router/server"
)

const (
	e2eNamespace = "dynamo"
	e2eBrokerID  = "broker-a.dynamo"
	e2eToken     = "broker-a-token-1b6f0c"
)

// busPKI writes a CA and the listener's certificate for 127.0.0.1 and
// localhost.
func busPKI(t *testing.T) (caFile, certFile, keyFile string) {
	t.Helper()
	ca, certFile, keyFile := testpki.ServerFiles(t, "bus e2e CA")
	return ca.WriteCA(t), certFile, keyFile
}

// e2eRouter starts a router discovering from etcd at endpoint, with
// KV-aware selection and the given load transport; busTLS, when set,
// enables the event-bus listener with one broker entry. opts adjust the
// configuration last.
func e2eRouter(t *testing.T, endpoint, transport string, busTLS []string, opts ...func(*config.Config)) (*server.Server, string) {
	t.Helper()
	c := config.Default()
	c.Server.BindAddress = "127.0.0.1:0"
	c.Admin.Token = "tok"
	c.Dynamo.Enabled = true
	c.Dynamo.Discovery.Etcd.Endpoints = []string{endpoint}
	c.Dynamo.Discovery.Etcd.WatchReconnectBackoff = config.Backoff{Initial: config.Duration(50 * time.Millisecond), Max: config.Duration(time.Second)}
	c.Dynamo.Load.DirectAllowCIDRs = []string{"127.0.0.0/8"}
	c.Dynamo.Load.Transport = transport
	c.Dynamo.KV.Enabled = true
	busAddr := ""
	if busTLS != nil {
		busAddr = freeAddr(t)
		sum := sha256.Sum256([]byte(e2eToken))
		b := &c.Dynamo.EventBus
		b.Enabled, b.Listen = true, busAddr
		b.TLS = config.BusTLS{Cert: busTLS[0], Key: busTLS[1]}
		b.Brokers = []config.BusClient{{ID: e2eBrokerID, Role: config.BusRoleBroker,
			TokenHash: "sha256:" + hex.EncodeToString(sum[:]), Namespaces: []string{e2eNamespace}}}
		b.HeartbeatInterval = config.Duration(time.Second)
	}
	for _, o := range opts {
		o(c)
	}
	srv, err := server.New(c, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv, busAddr
}

// brokerProc is the built switchyard binary running as the broker.
type brokerProc struct {
	cmd     *exec.Cmd
	metrics string
	stderr  *syncbuf.Buffer
	exited  chan struct{}
}

func startBroker(t *testing.T, bin, busAddr, caFile, etcdEndpoint string) *brokerProc {
	t.Helper()
	cmd := exec.Command(bin, "broker", "--bus-url", "https://"+busAddr, "--client-id", e2eBrokerID,
		"--namespace", e2eNamespace, "--ca-file", caFile, "--discovery", "etcd", "--etcd-endpoints", etcdEndpoint,
		"--metrics-listen", "127.0.0.1:0", "--log-level", "debug")
	cmd.Env = append(os.Environ(), DefaultBrokerTokenEnv+"="+e2eToken)
	p := &brokerProc{cmd: cmd, stderr: &syncbuf.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("broker log:\n%s", p.stderr.String())
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "broker stderr: %s", p.stderr.String())
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "broker: metrics on http://")
	require.True(t, ok, "first line %q", line)
	p.metrics = addr
	go io.Copy(io.Discard, out)
	return p
}

// metric reads one series from a /metrics page; -1 when absent.
func metric(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

func subs(t *testing.T, srv *server.Server, family, state, transport string) float64 {
	return metric(t, srv.Addr(), fmt.Sprintf(`switchyard_dynamo_%s_subscriptions{state=%q,transport=%q}`, family, state, transport))
}

// e2eWorker is a registered worker whose two publishers the test drives
// frame by frame: its own sequences, late ones and foreign ids included.
type e2eWorker struct {
	id          uint64
	load, kv    *publish.Publisher
	loadSeq     uint64
	kvSeq       uint64
	reg         *registrar.Registration
	eventID     uint64
	channels    []registrar.Channel
	description registrar.Worker
}

func newE2EWorker(t *testing.T, cli *clientv3.Client) *e2eWorker {
	t.Helper()
	lp, err := publish.New("kv_metrics")
	require.NoError(t, err)
	kp, err := publish.New(publish.KVEventsTopic)
	require.NoError(t, err)
	t.Cleanup(lp.Close)
	t.Cleanup(kp.Close)
	w := &e2eWorker{load: lp, kv: kp}
	w.description = registrar.Worker{Namespace: e2eNamespace, Component: "backend", WorkerType: "aggregated",
		Model: "e2e/model", BlockSize: 16, TotalKVBlocks: 1000, MaxNumBatchedTokens: 8192, MaxNumSeqs: 64,
		ContextLength: 8192, DPSize: 1, Transport: "127.0.0.1:1/e2e",
		Channels: []registrar.Channel{{Topic: "kv_metrics", PublisherID: lp.ID(), Endpoint: lp.Endpoint()},
			{Topic: "kv-events", PublisherID: kp.ID(), Endpoint: kp.Endpoint()}}}
	w.reg, err = registrar.Register(context.Background(), cli, w.description, 5, nil)
	require.NoError(t, err)
	t.Cleanup(w.reg.Kill)
	w.id = w.reg.InstanceID()
	return w
}

func (w *e2eWorker) sendLoad(t *testing.T, pid, seq, used uint64) {
	t.Helper()
	require.NoError(t, w.load.SendRaw(wire.LoadMessage(pid, seq, wire.ActiveLoad{WorkerID: w.id,
		ActiveDecodeBlocks: wire.U64(used / 2), ActivePrefillTokens: wire.U64(used * 3), KVUsedBlocks: wire.U64(used)}, time.Now())...))
}

// nextLoad publishes the next sequence.
func (w *e2eWorker) nextLoad(t *testing.T, used uint64) {
	w.loadSeq++
	w.sendLoad(t, w.load.ID(), w.loadSeq, used)
}

func (w *e2eWorker) sendKV(t *testing.T, pid, seq, eventID uint64, data wire.KvEventData) {
	t.Helper()
	require.NoError(t, w.kv.SendRaw(wire.KVEventsMessage(pid, seq, wire.RouterEvent{WorkerID: w.id, StorageTier: "device",
		Event: wire.KvCacheEvent{EventID: eventID, Data: data}}, time.Now())...))
}

// nextKV publishes the next sequence with the next event id (or eventID
// when not 0, a jump).
func (w *e2eWorker) nextKV(t *testing.T, eventID uint64, data wire.KvEventData) {
	w.kvSeq++
	if eventID == 0 {
		eventID = w.eventID + 1
	}
	w.eventID = eventID
	w.sendKV(t, w.kv.ID(), w.kvSeq, eventID, data)
}

func storedBlocks(parent *uint64, hashes ...uint64) wire.KvEventData {
	blocks := make([]wire.StoredBlock, len(hashes))
	for i, h := range hashes {
		blocks[i] = wire.StoredBlock{BlockHash: h, TokensHash: h}
	}
	return wire.KvEventData{Stored: &wire.KvStoreData{ParentHash: parent, Blocks: blocks}}
}

func removedBlocks(hashes ...uint64) wire.KvEventData {
	return wire.KvEventData{Removed: &wire.KvRemoveData{BlockHashes: hashes}}
}

// routerState is what a router's load store and KV index hold for the
// workers, without receipt times.
type routerState struct {
	Loads map[uint64]string
	Ranks map[uint64]string
	Index string
}

func stateOf(srv *server.Server, ws []*e2eWorker, probes [][]uint64) routerState {
	st := routerState{Loads: map[uint64]string{}, Ranks: map[uint64]string{}}
	for _, w := range ws {
		if s, ok := srv.Loads().Latest(load.Key{Namespace: e2eNamespace, WorkerID: w.id}); ok {
			st.Loads[w.id] = fmt.Sprintf("pub=%x seq=%d used=%d/%v decode=%d/%v prefill=%d/%v", s.PublisherID, s.Sequence,
				s.KVUsedBlocks, s.HasKVUsedBlocks, s.ActiveDecodeBlocks, s.HasDecodeBlocks, s.ActivePrefillTokens, s.HasPrefillTokens)
		}
	}
	stats := srv.KV().Stats()
	for _, r := range stats.Ranks {
		st.Ranks[r.Rank.WorkerID] = fmt.Sprintf("blocks=%d cursor=%d/%v", r.Blocks, r.Cursor, r.HasCursor)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "nodes=%d owned=%d", stats.Nodes, stats.Ownerships)
	for _, p := range probes {
		var m kv.Matches
		srv.KV().Match(p, &m)
		for i := range m.Ranks {
			fmt.Fprintf(&b, " %x:%d", m.Ranks[i].WorkerID, m.Blocks[i])
		}
		b.WriteString(";")
	}
	st.Index = b.String()
	return st
}

// tunnelRig is the shared etcd, two routers watching it (direct and via
// the broker), the broker process and two workers.
type tunnelRig struct {
	bin, ca  string
	etcd     *etcdtest.Server
	direct   *server.Server
	broker   *server.Server
	busAddr  string
	bp       *brokerProc
	workers  []*e2eWorker
	probes   [][]uint64
	probeMu  sync.Mutex
	etcdCli  *clientv3.Client
	brokerEP string // etcd the broker discovers from
}

// newTunnelRig starts the rig; brokerOpts adjust the broker router's
// configuration.
func newTunnelRig(t *testing.T, brokerEtcd *etcdtest.Server, brokerOpts ...func(*config.Config)) *tunnelRig {
	t.Helper()
	r := &tunnelRig{bin: buildBinary(t)}
	var cert, key string
	r.ca, cert, key = busPKI(t)
	r.etcd = etcdtest.Start(t)
	r.etcdCli = r.etcd.Client(t)
	r.brokerEP = r.etcd.Endpoint()
	if brokerEtcd != nil {
		r.brokerEP = brokerEtcd.Endpoint()
	}
	r.direct, _ = e2eRouter(t, r.etcd.Endpoint(), config.TransportDirect, nil)
	r.broker, r.busAddr = e2eRouter(t, r.etcd.Endpoint(), config.TransportBroker, []string{cert, key}, brokerOpts...)
	return r
}

// wait waits for cond; on a timeout it logs both routers' subscription
// state before failing.
func (r *tunnelRig) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Logf("direct router:\n%s\nbroker router:\n%s", routerDiag(r.direct), routerDiag(r.broker))
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// routerDiag is a router's subscription and event-bus series and its
// admin worker listing, for a failed test's log.
func routerDiag(srv *server.Server) string {
	var b strings.Builder
	if resp, err := http.Get("http://" + srv.Addr() + "/metrics"); err == nil {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if l := sc.Text(); !strings.HasPrefix(l, "#") && (strings.Contains(l, "subscriptions") || strings.Contains(l, "event_bus")) {
				b.WriteString(l + "\n")
			}
		}
		resp.Body.Close()
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+srv.Addr()+"/admin/dynamo/workers", nil)
	req.Header.Set("Authorization", "Bearer tok")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		fmt.Fprintf(&b, "subscriptions: %v\nbroker_coverage: %v\n", body["subscriptions"], body["broker_coverage"])
	}
	return b.String()
}

// withEPP turns on the broker router's endpoint picker (plaintext, a
// free port): a request routed through it is a real pick by the router's
// core, with no backend to forward it to.
func withEPP(c *config.Config) {
	c.EPP.Enabled, c.EPP.Listen, c.EPP.Plaintext, c.EPP.TargetPort = true, "127.0.0.1:0", true, 8000
}

// decodeSelections reads switchyard_dynamo_selection_total{role="decode"}
// by reason from a router's /metrics.
func decodeSelections(t *testing.T, srv *server.Server) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := map[string]float64{}
	re := regexp.MustCompile(`(?m)^switchyard_dynamo_selection_total\{reason="([a-z_]+)",role="decode"\} (\S+)$`)
	for _, m := range re.FindAllSubmatch(b, -1) {
		v, err := strconv.ParseFloat(string(m[2]), 64)
		require.NoError(t, err)
		out[string(m[1])] = v
	}
	require.NotEmpty(t, out, "no decode selection series")
	return out
}

// pick routes one chat completion through the broker router's endpoint
// picker, ends it, and waits until the picker has let it go (so the next
// pick starts from an empty account). It returns the decode worker pinned
// and the selection reason the router counted for it.
func (r *tunnelRig) pick(t *testing.T) (uint64, string) {
	t.Helper()
	before := decodeSelections(t, r.broker)
	conn, err := grpc.NewClient(r.broker.EPPAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	g := &extproctest.Gateway{Announce: true, Picker: extprocv3.NewExternalProcessorClient(conn)}
	req, err := http.NewRequest(http.MethodPost, "http://gateway/v1/chat/completions", nil)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	body := []byte(`{"model":"e2e/model","max_tokens":4,"messages":[{"role":"user","content":"which worker?"}]}`)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := g.Route(ctx, req, body)
	require.NoError(t, err)
	h.Close()
	require.Nil(t, h.Immediate, "routed, not answered")
	id, err := strconv.ParseUint(h.Header.Get("x-dynamo-worker-instance-id"), 10, 64)
	require.NoError(t, err, "pins %v", h.Header)
	r.wait(t, "the endpoint picker to end the request", func() bool {
		return metric(t, r.broker.Addr(), "switchyard_epp_streams") == 0
	})
	after := decodeSelections(t, r.broker)
	reason := ""
	for k, v := range after {
		if v != before[k] {
			require.Empty(t, reason, "one selection per pick: %v then %v", before, after)
			require.Equal(t, before[k]+1, v, "reason %s", k)
			reason = k
		}
	}
	require.NotEmpty(t, reason, "the pick was counted")
	return id, reason
}

// freshLoads publishes a new load sample from every worker and waits until
// the broker router holds them all.
func (r *tunnelRig) freshLoads(t *testing.T, used uint64) {
	t.Helper()
	want := make([]uint64, len(r.workers))
	for i, x := range r.workers {
		x.nextLoad(t, used)
		want[i] = x.loadSeq
	}
	r.wait(t, "fresh load samples at the broker router", func() bool {
		for i, x := range r.workers {
			s, ok := r.broker.Loads().Latest(load.Key{Namespace: e2eNamespace, WorkerID: x.id})
			if !ok || s.Sequence < want[i] {
				// PUB drops what it sends before a subscription reaches
				// it: repeat the sample under a new sequence.
				x.nextLoad(t, used)
				return false
			}
		}
		return true
	})
}

// loadPick waits for a pick costed on fresh load samples (reason
// kv_aware). A pick made well within dynamo.load.max_staleness (3 s) of
// the samples' arrival must be one; a slower one (a busy machine) is
// retried on new samples.
func (r *tunnelRig) loadPick(t *testing.T, used uint64) {
	t.Helper()
	r.wait(t, "a pick on fresh load samples", func() bool {
		r.freshLoads(t, used)
		arrived := time.Now()
		_, reason := r.pick(t)
		if time.Since(arrived) < 2*time.Second {
			require.Equal(t, picker.ReasonKVAware, reason, "a pick on fresh samples")
		}
		return reason == picker.ReasonKVAware
	})
}

func (r *tunnelRig) addWorkers(t *testing.T, n int) {
	for range n {
		r.workers = append(r.workers, newE2EWorker(t, r.etcdCli))
	}
}

// warm makes every subscription of both routers receive a first load
// sample and a first KV event (PUB drops what it sends before a
// subscriber's subscription arrives, so the first messages repeat).
func (r *tunnelRig) warm(t *testing.T, ws []*e2eWorker, routers ...*server.Server) {
	t.Helper()
	for _, w := range ws {
		w.nextKV(t, 0, storedBlocks(nil, w.id<<8|1))
		w.nextLoad(t, 1)
	}
	r.wait(t, "first load sample and KV event at every router", func() bool {
		for _, srv := range routers {
			st := srv.KV().Stats()
			for _, w := range ws {
				_, ok := srv.Loads().Latest(load.Key{Namespace: e2eNamespace, WorkerID: w.id})
				has := false
				for _, rk := range st.Ranks {
					has = has || rk.Rank.WorkerID == w.id && rk.HasCursor
				}
				if !ok || !has {
					// Repeat: a late duplicate sequence for whoever has it.
					w.loadSeq++
					w.sendLoad(t, w.load.ID(), w.loadSeq, 1)
					w.kvSeq++
					w.sendKV(t, w.kv.ID(), w.kvSeq, 1, storedBlocks(nil, w.id<<8|1))
					return false
				}
			}
		}
		return true
	})
}

// traffic is the same scripted traffic for every router: growing chains,
// removals, a late sequence, a foreign publisher id, a sequence gap and an
// event-id gap, then a final marker per worker.
func (r *tunnelRig) traffic(t *testing.T) {
	t.Helper()
	for i, w := range r.workers {
		base := w.id << 8
		p1 := base | 1
		w.nextKV(t, 0, storedBlocks(&p1, base|2, base|3, base|4))
		w.nextLoad(t, 10)
		w.nextKV(t, 0, removedBlocks(base|4))
		w.nextLoad(t, 12)
		// A late load sequence and a late KV sequence: dropped.
		w.sendLoad(t, w.load.ID(), w.loadSeq-1, 999)
		w.sendKV(t, w.kv.ID(), w.kvSeq-1, w.eventID+1, storedBlocks(nil, base|0x99))
		// A foreign publisher id on both: refused.
		w.sendLoad(t, w.load.ID()^0xabcdef, w.loadSeq+1, 777)
		w.sendKV(t, w.kv.ID()^0xabcdef, w.kvSeq+1, w.eventID+1, storedBlocks(nil, base|0x77))
		// A transport sequence gap on load, an event-id gap on the second
		// worker's KV (the rank is cleared, then the event applies).
		w.loadSeq++
		w.nextLoad(t, 20+uint64(i))
		p3 := base | 3
		if i == 1 {
			w.nextKV(t, w.eventID+3, storedBlocks(&p3, base|5))
		} else {
			w.nextKV(t, 0, storedBlocks(&p3, base|5))
		}
		w.nextKV(t, 0, removedBlocks(base|2))
		w.nextLoad(t, 30+uint64(i))
		r.probes = append(r.probes, []uint64{p1, base | 2, base | 3, base | 4, base | 5})
	}
}

// settled waits until every router shows each worker's last load
// sequence and KV event id.
func (r *tunnelRig) settled(t *testing.T, routers ...*server.Server) {
	t.Helper()
	r.wait(t, "the last load sequence and KV event id at every router", func() bool {
		for _, srv := range routers {
			st := srv.KV().Stats()
			for _, w := range r.workers {
				s, ok := srv.Loads().Latest(load.Key{Namespace: e2eNamespace, WorkerID: w.id})
				if !ok || s.Sequence != w.loadSeq {
					return false
				}
				has := false
				for _, rk := range st.Ranks {
					has = has || rk.Rank.WorkerID == w.id && rk.Cursor == w.eventID
				}
				if !has {
					return false
				}
			}
		}
		return true
	})
}

// Same state as a direct dial: two routers follow the same publishers,
// one dialing them, the other through the real broker process over TLS
// 1.3 and HTTP/2; after the same traffic (late sequences, foreign
// publisher ids, removals, gaps) their load stores and KV indexes hold the
// same state.
func TestBrokerTunnelSameStateAsDirect(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	r := newTunnelRig(t, nil)
	r.addWorkers(t, 2)
	r.bp = startBroker(t, r.bin, r.busAddr, r.ca, r.brokerEP)
	r.wait(t, "every subscription connected, direct and through the broker", func() bool {
		return subs(t, r.direct, "load", "connected", "direct") == 2 && subs(t, r.direct, "kv", "connected", "direct") == 2 &&
			subs(t, r.broker, "load", "connected", "broker") == 2 && subs(t, r.broker, "kv", "connected", "broker") == 2
	})
	require.Equal(t, 4.0, metric(t, r.bp.metrics, `switchyard_broker_streams`))
	r.warm(t, r.workers, r.direct, r.broker)
	r.traffic(t)
	r.settled(t, r.direct, r.broker)

	direct, relayed := stateOf(r.direct, r.workers, r.probes), stateOf(r.broker, r.workers, r.probes)
	require.Equal(t, direct, relayed)
	// The traffic did what it says: the late and foreign messages were
	// dropped (no 999 or 777 load), the removals applied.
	for _, w := range r.workers {
		require.Contains(t, direct.Loads[w.id], fmt.Sprintf("pub=%x", w.load.ID()))
		require.NotContains(t, direct.Loads[w.id], "999")
		require.NotContains(t, direct.Loads[w.id], "777")
	}
	require.Len(t, direct.Ranks, 2)
	require.Greater(t, metric(t, r.bp.metrics, `switchyard_broker_stream_bytes_total{direction="to_router"}`), 0.0)
	require.Greater(t, metric(t, r.bp.metrics, `switchyard_broker_stream_bytes_total{direction="to_publisher"}`), 0.0)
	require.Equal(t, 4.0, metric(t, r.bp.metrics, `switchyard_broker_stream_opens_total{result="opened"}`))

	// SIGTERM drains: the router hears draining, every stream ends, the
	// process exits 0 and the router's subscriptions wait for a broker.
	require.NoError(t, r.bp.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-r.bp.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the broker did not exit after SIGTERM")
	}
	require.True(t, r.bp.cmd.ProcessState.Success(), "exit: %v\n%s", r.bp.cmd.ProcessState, r.bp.stderr.String())
	require.Contains(t, r.bp.stderr.String(), "event bus session draining")
	r.wait(t, "every broker subscription pending after the drain", func() bool {
		return subs(t, r.broker, "load", "pending", "broker") == 2 && subs(t, r.broker, "kv", "pending", "broker") == 2
	})
}

// Killing the broker: SIGKILL leaves the broker router's subscriptions
// pending, and requests routed meanwhile (through its endpoint picker)
// rotate over the workers once their samples are stale
// (round_robin_stale); a removal published meanwhile is missed; a new
// broker brings every subscription back, the next event's id gap clears
// the rank so the missed removal leaves no stale block, and picks are
// costed on fresh load samples again.
func TestBrokerTunnelKilledBrokerRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	r := newTunnelRig(t, nil, withEPP)
	r.addWorkers(t, 2)
	r.bp = startBroker(t, r.bin, r.busAddr, r.ca, r.brokerEP)
	r.wait(t, "every broker subscription connected", func() bool {
		return subs(t, r.broker, "load", "connected", "broker") == 2 && subs(t, r.broker, "kv", "connected", "broker") == 2
	})
	r.warm(t, r.workers, r.broker)
	w := r.workers[0]
	base := w.id << 8
	p1 := base | 1
	w.nextKV(t, 0, storedBlocks(&p1, base|2, base|3))
	r.settled(t, r.broker)
	probe := []uint64{p1, base | 2, base | 3}
	matched := func() uint32 {
		var m kv.Matches
		r.broker.KV().Match(probe, &m)
		for i, rk := range m.Ranks {
			if rk.WorkerID == w.id {
				return m.Blocks[i]
			}
		}
		return 0
	}
	require.Equal(t, uint32(3), matched())
	// Load selection through the broker: picks are costed on the samples
	// it relays.
	r.loadPick(t, 6)

	require.NoError(t, r.bp.cmd.Process.Signal(syscall.SIGKILL))
	<-r.bp.exited
	r.wait(t, "every broker subscription pending", func() bool {
		return subs(t, r.broker, "load", "pending", "broker") == 2 && subs(t, r.broker, "kv", "pending", "broker") == 2
	})
	// Missed: the router has no stream while this is published.
	w.nextKV(t, 0, removedBlocks(base|3))
	require.Equal(t, uint32(3), matched(), "the removal cannot have arrived")
	// No sample arrives while pending: once the last ones are older than
	// dynamo.load.max_staleness, requests rotate over the workers
	// (round_robin_stale). Until then a pick may still be costed on them.
	r.wait(t, "a round_robin_stale pick while pending", func() bool {
		_, reason := r.pick(t)
		if reason != picker.ReasonRoundRobinStale {
			require.Equal(t, picker.ReasonKVAware, reason)
			return false
		}
		return true
	})
	picked := map[uint64]int{}
	for range 4 {
		id, reason := r.pick(t)
		require.Equal(t, picker.ReasonRoundRobinStale, reason, "every pick while the subscriptions are pending")
		picked[id]++
	}
	require.Equal(t, map[uint64]int{r.workers[0].id: 2, r.workers[1].id: 2}, picked, "the picks rotate over both workers")
	require.Equal(t, 2.0, subs(t, r.broker, "load", "pending", "broker"), "still pending")

	r.bp = startBroker(t, r.bin, r.busAddr, r.ca, r.brokerEP)
	r.wait(t, "every subscription back through the new broker", func() bool {
		return subs(t, r.broker, "load", "connected", "broker") == 2 && subs(t, r.broker, "kv", "connected", "broker") == 2
	})
	// The next event (id +1 after the missed one) is a gap for the
	// router: the rank is cleared, then the event applies. Repeat it until
	// the new subscription has reached the publisher (a duplicate id is
	// late for a router that has it).
	next := w.eventID + 1
	w.eventID = next
	r.wait(t, "the post-gap event applied", func() bool {
		w.kvSeq++
		w.sendKV(t, w.kv.ID(), w.kvSeq, next, storedBlocks(nil, base|9))
		for _, rk := range r.broker.KV().Stats().Ranks {
			if rk.Rank.WorkerID == w.id && rk.Cursor == next {
				return true
			}
		}
		return false
	})
	require.Equal(t, uint32(0), matched(), "the gap cleared the rank: no block of the missed removal's chain is claimed")
	// Load selection is back: fresh samples arrive through the new broker
	// and picks are costed on them again.
	r.loadPick(t, 42)
	for _, x := range r.workers {
		s, ok := r.broker.Loads().Latest(load.Key{Namespace: e2eNamespace, WorkerID: x.id})
		require.True(t, ok)
		require.True(t, s.HasKVUsedBlocks)
		require.Equal(t, uint64(42), s.KVUsedBlocks)
	}
}

// Unadvertised publisher: the broker's own discovery (another etcd)
// advertises only the first worker; the router asks for both, and the
// second is refused with target_not_advertised, counted at the broker,
// while the first connects.
func TestBrokerTunnelRefusesUnadvertisedPublisher(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	brokerEtcd := etcdtest.Start(t)
	r := newTunnelRig(t, brokerEtcd)
	r.addWorkers(t, 2)
	// Only the first worker is advertised where the broker looks.
	reg, err := registrar.Register(context.Background(), brokerEtcd.Client(t), r.workers[0].description, 5, nil)
	require.NoError(t, err)
	t.Cleanup(reg.Kill)
	r.bp = startBroker(t, r.bin, r.busAddr, r.ca, r.brokerEP)
	r.wait(t, "the advertised worker's subscriptions connected, the other's refused", func() bool {
		return subs(t, r.broker, "load", "connected", "broker") == 1 && subs(t, r.broker, "kv", "connected", "broker") == 1 &&
			metric(t, r.bp.metrics, `switchyard_broker_stream_opens_total{result="target_not_advertised"}`) >= 2
	})
	require.Equal(t, 2.0, metric(t, r.bp.metrics, `switchyard_broker_stream_opens_total{result="opened"}`))
	require.Equal(t, 2.0, metric(t, r.bp.metrics, `switchyard_broker_streams`))
	require.Contains(t, r.bp.stderr.String(), "target is not advertised")
	require.GreaterOrEqual(t, metric(t, r.broker.Addr(), `switchyard_event_bus_stream_opens_total{result="refused"}`), 2.0)
	r.warm(t, r.workers[:1], r.broker)
	_, ok := r.broker.Loads().Latest(load.Key{Namespace: e2eNamespace, WorkerID: r.workers[1].id})
	require.False(t, ok, "nothing of the unadvertised publisher reaches the router")
}
