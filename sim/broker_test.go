package sim

import (
	"slices"
	"strings"
	"testing"
	"time"

	"switchyard/router/bus/wire"
	"switchyard/router/core"
	"switchyard/router/eventplane"
	"switchyard/router/events"
	"switchyard/router/kv"
)

// The simulator mirrors router/eventplane's timings without importing it;
// this keeps the copies equal.
func TestBrokerTimingsAreTheSupervisors(t *testing.T) {
	if PendingWakeJitter != eventplane.PendingWakeJitter || SessionLossGrace != eventplane.SessionLossGrace ||
		ReconnectFloor != eventplane.BackoffInitial {
		t.Fatal("the simulator's broker timings differ from router/eventplane's")
	}
	if MaxBrokerNamespaces != wire.MaxNamespaces {
		t.Fatal("a scenario's broker covers another number of namespaces than a hello may declare")
	}
	if TransportDirect != eventplane.TransportDirect || TransportBroker != eventplane.TransportBroker {
		t.Fatal("transport names differ from router/eventplane's")
	}
}

func TestBrokerSettingsAreValidatedWithTheirPaths(t *testing.T) {
	base := "fleet: [{role: aggregated, count: 2}]\nworkload: {poisson: {rate: 1, count: 1, prompt: {min: 1, max: 2}, output: {min: 1, max: 2}}}\n"
	for _, tc := range []struct{ yaml, want string }{
		{"router: {load_transport: relay}\n", "router.load_transport: must be direct or broker"},
		{"router: {load_transport: broker}\n", "brokers: router.load_transport broker needs at least one broker"},
		{"brokers: [{id: a, namespaces: [dynamo]}]\n", "brokers: apply only with router.load_transport: broker"},
		{"router: {load_transport: broker}\nbrokers: [{id: a, namespaces: [dynamo]}, {id: a, namespaces: [x]}]\n", `brokers[1].id: "a" is already a broker's`},
		{"router: {load_transport: broker}\nbrokers: [{namespaces: [dynamo]}]\n", "brokers[0].id: required"},
		{"router: {load_transport: broker}\nbrokers: [{id: a}]\n", "brokers[0].namespaces: at least one namespace"},
		{"router: {load_transport: broker}\nbrokers: [{id: a, namespaces: ['']}]\n", "brokers[0].namespaces[0]: must be 1-255 bytes"},
		{"router: {load_transport: broker}\nbrokers: [{id: a, namespaces: [" + strings.Repeat("n,", MaxBrokerNamespaces) + "n]}]\n",
			"brokers[0].namespaces: 65 namespaces, at most 64"},
		{"router: {load_transport: broker}\nbrokers: [{id: a, namespaces: [dynamo]}]\nfaults: [{at: 1s, kind: kill_broker}]\n", "faults[0].broker: required for kill_broker"},
		{"router: {load_transport: broker}\nbrokers: [{id: a, namespaces: [dynamo]}]\nfaults: [{at: 1s, kind: restart_broker, broker: b}]\n", `faults[0].broker: "b" is not a broker's id`},
		{"router: {load_transport: broker}\nbrokers: [{id: a, namespaces: [dynamo]}]\nfaults: [{at: 1s, kind: drain_broker, broker: a, worker: 1}]\n", "faults[0]: drain_broker takes broker, not worker"},
		{"faults: [{at: 1s, kind: kill_broker, broker: a}]\n", "faults[0].kind: kill_broker needs router.load_transport: broker"},
		{"faults: [{at: 1s, kind: kill, worker: 0, broker: a}]\n", "faults[0].broker: only for kill_broker"},
		{"router: {load_transport: broker}\nbrokers: [{id: a, namespaces: [dynamo]}]\ndiscovery: {source: kubernetes_pods}\n", "router.load_transport: broker needs event channels"},
	} {
		_, err := ParseScenario([]byte(base + tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.yaml, err, tc.want)
		}
	}
	ok := base + "router: {load_transport: broker}\nbrokers: [{id: a, namespaces: [dynamo]}]\nfaults: [{at: 1s, kind: kill_broker, broker: a}]\n"
	sc, err := ParseScenario([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if y := sc.YAML(); !strings.Contains(y, "load_transport: broker") || !strings.Contains(y, "broker: a") || !strings.Contains(y, "id: a") {
		t.Fatalf("rendered scenario misses the broker settings:\n%s", y)
	}
	if y := scenario(t, base).YAML(); strings.Contains(y, "broker") || strings.Contains(y, "load_transport") {
		t.Fatalf("a scenario without brokers renders broker settings:\n%s", y)
	}
}

// sessionTap keeps the core's subscription-session inputs and its
// kv-events results, with their times.
type sessionTap struct {
	*textTap
	kvDown, kvUp map[uint64][]time.Duration
	loadUp       map[uint64][]time.Duration
	gapsAfter    map[uint64]int // gaps per publisher after its first reconnection
	lostAt       []time.Duration
}

func newSessionTap() *sessionTap {
	return &sessionTap{textTap: newTextTap(), kvDown: map[uint64][]time.Duration{}, kvUp: map[uint64][]time.Duration{},
		loadUp: map[uint64][]time.Duration{}, gapsAfter: map[uint64]int{}}
}

func (s *sessionTap) Record(out core.Output) {
	s.textTap.Record(out)
	switch o := out.(type) {
	case events.KVDisconnected:
		s.kvDown[o.PublisherID] = append(s.kvDown[o.PublisherID], o.At.Sub(Epoch))
	case events.KVConnected:
		s.kvUp[o.PublisherID] = append(s.kvUp[o.PublisherID], o.At.Sub(Epoch))
	case events.LoadConnected:
		s.loadUp[o.PublisherID] = append(s.loadUp[o.PublisherID], o.At.Sub(Epoch))
	case core.KVApplied:
		if o.Result == kv.PublisherLostResult {
			s.lostAt = append(s.lostAt, o.At.Sub(Epoch))
		}
		if o.Result == "gap" && len(s.kvUp[o.PublisherID]) > 1 {
			s.gapsAfter[o.PublisherID]++
		}
	}
}

func runBrokers(t *testing.T, src string) (Summary, *sessionTap) {
	t.Helper()
	tap := newSessionTap()
	r, err := New(scenario(t, src), Options{Record: tap})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Execute()
	if err != nil {
		t.Fatal(err)
	}
	if s.Brokers == nil {
		t.Fatal("no broker summary")
	}
	return s, tap
}

const brokerFleet = `
seed: 5
picker: kv
fleet:
  - {role: aggregated, count: 4, total_kv_blocks: 256}
router: {load_transport: broker}
`

const brokerWork = `workload:
  shared_prefix: {rate: 20, count: 400, groups: 8, users_per_group: 4, system_tokens: 1024, question_tokens: 128, output: {min: 8, max: 32}}
`

const twoBrokers = `brokers:
  - {id: broker-a, namespaces: [dynamo]}
  - {id: broker-b, namespaces: [dynamo, other]}
`

// Without faults the brokers change nothing the core sees: the run is
// the direct run, input for input.
func TestABrokerRunWithoutFaultsIsTheDirectRun(t *testing.T) {
	_, direct := execute(t, scenario(t, strings.Replace(brokerFleet, "router: {load_transport: broker}\n", "", 1)+brokerWork), Options{})
	s, brokered := runBrokers(t, brokerFleet+brokerWork+twoBrokers)
	if direct.sum() != brokered.sum() {
		t.Fatal("a broker run without faults differs from the direct run")
	}
	b := s.Brokers
	if b.Brokers[0].Opened+b.Brokers[1].Opened != 8 || b.Brokers[0].Opened == 0 || b.Brokers[1].Opened == 0 || b.Lost != 0 || b.Pending != 0 {
		t.Fatalf("placement %+v", b)
	}
}

// A killed broker's streams end at once; each subscription opens again at
// the reconnect floor on the other covering broker, the kv-events ones
// keep their cursors, so the events missed meanwhile show as gaps.
func TestAKilledBrokersSubscriptionsMoveWithinTheFloor(t *testing.T) {
	s, tap := runBrokers(t, brokerFleet+brokerWork+twoBrokers+"faults:\n  - {at: 8s, kind: kill_broker, broker: broker-a}\n")
	b := s.Brokers
	if b.Lost == 0 || b.Replaced != b.Lost || b.Pending != 0 || b.StillPending != 0 {
		t.Fatalf("summary %+v", b)
	}
	want := 8*time.Second + ReconnectFloor + 2*time.Millisecond // the subscribe delay
	if b.MaxOutage != want-8*time.Second {
		t.Fatalf("longest outage %v, want %v", b.MaxOutage, want-8*time.Second)
	}
	if a, bb := b.Brokers[0], b.Brokers[1]; a.Live || a.Carried != 0 || !bb.Live || bb.Carried != 8 || bb.Opened != 8-a.Opened+b.Lost {
		t.Fatalf("brokers %+v", b.Brokers)
	}
	moved, gaps := 0, 0
	for id, down := range tap.kvDown {
		up := tap.kvUp[id]
		if !slices.Equal(down, []time.Duration{8 * time.Second}) || len(up) != 2 || up[1] != want {
			t.Fatalf("publisher %d: down %v, up %v; want down at 8s, up again at %v", id, down, up, want)
		}
		moved++
		gaps += tap.gapsAfter[id]
	}
	loadMoved := 0
	for _, up := range tap.loadUp {
		if len(up) == 2 && up[1] == want {
			loadMoved++
		}
	}
	if moved == 0 || moved+loadMoved != b.Lost {
		t.Fatalf("%d kv-events and %d kv_metrics subscriptions moved, %d streams lost", moved, loadMoved, b.Lost)
	}
	if gaps == 0 {
		t.Fatal("no gap cleared a rank after the failover: missed events went unnoticed")
	}
	if len(tap.lostAt) != 0 {
		t.Fatalf("publishers cleared at %v by the 60 s rule", tap.lostAt)
	}
}

// With no covering broker left the subscriptions are pending; when a
// broker's new session arrives each opens after its own seeded jitter of
// at most PendingWakeJitter.
func TestPendingSubscriptionsWakeWithJitter(t *testing.T) {
	src := brokerFleet + brokerWork + "brokers: [{id: only, namespaces: [dynamo]}]\nfaults:\n" +
		"  - {at: 5s, kind: kill_broker, broker: only}\n  - {at: 12s, kind: restart_broker, broker: only}\n"
	s, tap := runBrokers(t, src)
	b := s.Brokers
	if b.Lost != 8 || b.Replaced != 8 || b.Pending != 8 || b.StillPending != 0 || b.Brokers[0].Sessions != 2 {
		t.Fatalf("summary %+v", b)
	}
	// Pending from the reconnect floor to the new session plus jitter.
	if lo, hi := 12*time.Second-5*time.Second-ReconnectFloor, 12*time.Second+PendingWakeJitter-5*time.Second-ReconnectFloor; b.MaxPending < lo || b.MaxPending > hi {
		t.Fatalf("longest pending %v, want within [%v, %v]", b.MaxPending, lo, hi)
	}
	times := map[time.Duration]bool{}
	for _, ups := range []map[uint64][]time.Duration{tap.kvUp, tap.loadUp} {
		for id, up := range ups {
			if len(up) != 2 || up[1] < 12*time.Second+2*time.Millisecond || up[1] > 12*time.Second+PendingWakeJitter+2*time.Millisecond {
				t.Fatalf("publisher %d connected at %v", id, up)
			}
			times[up[1]] = true
		}
	}
	if len(times) < 4 {
		t.Fatalf("8 subscriptions woke at only %d distinct times: no jitter", len(times))
	}
	// The same seed draws the same jitter; another seed other jitter.
	if _, again := runBrokers(t, src); again.sum() != tap.sum() {
		t.Fatal("two runs of one broker scenario differ")
	}
	if _, other := runBrokers(t, strings.Replace(src, "seed: 5", "seed: 6", 1)); other.sum() == tap.sum() {
		t.Fatal("another seed ran the identical run")
	}
}

// A drained broker keeps its streams but takes no new ones: when the
// other broker dies its subscriptions go pending.
func TestADrainedBrokerTakesNothingNew(t *testing.T) {
	s, _ := runBrokers(t, brokerFleet+brokerWork+twoBrokers+"faults:\n"+
		"  - {at: 2s, kind: drain_broker, broker: broker-a}\n  - {at: 8s, kind: kill_broker, broker: broker-b}\n")
	b := s.Brokers
	a := b.Brokers[0]
	if b.Lost == 0 || a.Carried != a.Opened || a.Carried+b.Lost != 8 || b.StillPending != b.Lost || b.Replaced != 0 {
		t.Fatalf("summary %+v", b)
	}
}

// Subscriptions without a broker for 60 s lose their publishers' blocks,
// by the core's rule on its timer, as disconnected ones do.
func TestSixtySecondsWithoutABrokerClearTheBlocks(t *testing.T) {
	src := strings.Replace(brokerFleet+brokerWork, "rate: 20, count: 400", "rate: 4, count: 300", 1) +
		"brokers: [{id: only, namespaces: [dynamo]}]\nfaults: [{at: 5s, kind: kill_broker, broker: only}]\n"
	s, tap := runBrokers(t, src)
	if s.Brokers.StillPending != 8 {
		t.Fatalf("summary %+v", s.Brokers)
	}
	if len(tap.lostAt) == 0 {
		t.Fatal("no publisher was cleared")
	}
	for _, at := range tap.lostAt {
		if at != 5*time.Second+core.KVStaleAfter {
			t.Fatalf("publishers cleared at %v, want at %v", tap.lostAt, 5*time.Second+core.KVStaleAfter)
		}
	}
}

// The shipped broker scenario does what its comments say: broker-a's
// streams fail over to broker-b at the floor, worker 1's new subscriptions
// go to broker-a while broker-b drains and wait pending once broker-a dies
// again, broker-b's restart brings every subscription back, and gaps (not
// the 60 s rule) clear the ranks whose removals were missed.
func TestTheShippedBrokerScenario(t *testing.T) {
	sc, err := LoadScenario("../scenarios/broker-failover.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tap := newSessionTap()
	r, err := New(sc, Options{Record: tap})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Execute()
	if err != nil {
		t.Fatal(err)
	}
	if s.Served != s.Requests || s.Requests != sc.ExpectedRequests() {
		t.Fatalf("summary %+v", s)
	}
	b := s.Brokers
	a, bb := b.Brokers[0], b.Brokers[1]
	if a.Live || a.Sessions != 2 || a.Carried != 0 || !bb.Live || bb.Sessions != 2 || bb.Carried != 16 {
		t.Fatalf("brokers %+v", b.Brokers)
	}
	// Worker 1's two subscriptions, the only ones pending: from the floor
	// after broker-a's second death to broker-b's new session, its jitter
	// and the subscribe delay.
	subscribe := sc.Network.SubscribeDelay.Std()
	if b.Pending != 2 || b.StillPending != 0 || b.Replaced != b.Lost || b.Lost <= 16 ||
		b.MaxPending < 5*time.Second-ReconnectFloor+subscribe || b.MaxPending > 5*time.Second-ReconnectFloor+PendingWakeJitter+subscribe {
		t.Fatalf("summary %+v", b)
	}
	gaps := 0
	for _, n := range tap.gapsAfter {
		gaps += n
	}
	if gaps == 0 {
		t.Fatal("no gap cleared a rank after a failover")
	}
	// The one publisher cleared is worker 1's old kv-events publisher, when
	// its records leave at its restart; nothing waited out the 60 s rule.
	if restart := 30*time.Second + sc.Network.DiscoveryDelay.Std(); !slices.Equal(tap.lostAt, []time.Duration{restart}) {
		t.Fatalf("publishers cleared at %v, want only the restarted one at %v", tap.lostAt, restart)
	}
}
