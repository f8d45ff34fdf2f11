package sim

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"switchyard/router/core"
	"switchyard/router/events"
)

// outputTap keeps every core output with its kind (textTap's lines and
// hash as well), so a test can ask what the core saw and when.
type outputTap struct {
	*textTap
	outs []core.Output
}

func newOutputTap() *outputTap { return &outputTap{textTap: newTextTap()} }

func (o *outputTap) Record(out core.Output) {
	o.outs = append(o.outs, out)
	o.textTap.Record(out)
}

// resyncs are the times of the DiscoveryResync inputs.
func (o *outputTap) resyncs() []time.Duration {
	var at []time.Duration
	for _, out := range o.outs {
		if e, ok := out.(events.DiscoveryResync); ok {
			at = append(at, e.At.Sub(Epoch))
		}
	}
	return at
}

// published are the registry's publishes: time and workers.
func (o *outputTap) published() []core.Published {
	var ps []core.Published
	for _, out := range o.outs {
		if p, ok := out.(core.Published); ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// workersAt is how many workers the registry held at d.
func (o *outputTap) workersAt(d time.Duration) int {
	n := 0
	for _, p := range o.published() {
		if p.At.Sub(Epoch) <= d {
			n = p.Workers
		}
	}
	return n
}

func runTapped(t *testing.T, src string, opts Options) (*Run, Summary, *outputTap) {
	t.Helper()
	tap := newOutputTap()
	opts.Record = tap
	r, err := New(scenario(t, src), opts)
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Execute()
	if err != nil {
		t.Fatal(err)
	}
	return r, s, tap
}

const threeWorkers = `
seed: 31
fleet:
  - {role: aggregated, count: 3}
network: {lease_ttl: 1s}
workload:
  poisson: {rate: 20, count: 240, prompt: {min: 100, max: 400}, output: {min: 4, max: 16}}
`

// While etcd is away the router's registry keeps serving what it held and
// hears of no change; when the watch comes back one relist replaces the
// namespace: a worker whose lease lapsed meanwhile leaves, a publisher
// restart the watch missed is followed, and a dead worker's lease (renewed
// by etcd on its return) lapses one TTL after etcd came back.
func TestEtcdRestartHoldsChangesUntilOneRelist(t *testing.T) {
	r, s, tap := runTapped(t, threeWorkers+`
faults:
  - {at: 2s, kind: etcd_restart, duration: 3s}
  - {at: 2500ms, worker: 0, kind: kill}
  - {at: 3s, worker: 1, kind: restart_publisher}
  - {at: 3500ms, worker: 2, kind: lease_expiry}
`, Options{})
	const delay = 5 * time.Millisecond
	relist := 5*time.Second + delay
	if got := tap.resyncs(); len(got) != 2 || got[0] != delay || got[1] != relist {
		t.Fatalf("resyncs at %v, want the seed and one relist at %v", got, relist)
	}
	if s.Resyncs != 1 {
		t.Fatalf("summary counts %d relists", s.Resyncs)
	}
	for _, out := range tap.outs {
		at := out.Time().Sub(Epoch)
		switch out.(type) {
		case events.DiscoveryPut, events.DiscoveryDelete, core.Published:
			if at >= 2*time.Second && at < relist {
				t.Fatalf("the router heard %T at %v, while its watch was down", out, at)
			}
		}
	}
	// Worker 2's records left etcd during the outage: the relist drops
	// it. Worker 0's lease was renewed when etcd returned (5s), so it
	// leaves one TTL later, through the watch.
	if n := tap.workersAt(relist - time.Millisecond); n != 3 {
		t.Fatalf("%d workers before the relist, want all 3 still served", n)
	}
	if n := tap.workersAt(relist); n != 2 {
		t.Fatalf("%d workers after the relist, want 2", n)
	}
	if n := tap.workersAt(6*time.Second + delay - time.Millisecond); n != 2 {
		t.Fatalf("the dead worker left before its renewed lease lapsed: %d workers", n)
	}
	if n := tap.workersAt(6*time.Second + delay); n != 1 {
		t.Fatalf("%d workers after the dead worker's lease lapsed, want 1", n)
	}
	// The missed publisher restart: the router subscribes to worker 1's
	// new kv_metrics publisher only once the relist names it.
	newPub := r.workers[1].pub.id
	connected := time.Duration(-1)
	for _, out := range tap.outs {
		if c, ok := out.(events.LoadConnected); ok && c.PublisherID == newPub {
			connected = c.At.Sub(Epoch)
		}
	}
	if want := relist + r.sc.Network.SubscribeDelay.Std(); connected != want {
		t.Fatalf("worker 1's new publisher connected at %v, want %v", connected, want)
	}
	// Worker 2 lives on, unpicked after the relist.
	for _, sel := range tap.selections {
		if sel.At.Sub(Epoch) > relist && sel.Sel.Decode.WorkerID == r.workers[2].id {
			t.Fatalf("picked worker 2 at %v, after its records left", sel.At.Sub(Epoch))
		}
	}
	if !r.workers[2].alive || s.Served+s.Failed != 240 {
		t.Fatalf("summary %+v", s)
	}
}

// A compacted watch revision costs one relist after the source's first
// backoff: no worker lost, none doubled, the registry's generation does
// not move, and no subscription is touched.
func TestEtcdCompactionRelistsOnceAndLosesNothing(t *testing.T) {
	r, s, tap := runTapped(t, threeWorkers+"picker: kv\nfaults:\n  - {at: 2s, kind: etcd_compaction}\n", Options{})
	want := 2*time.Second + 500*time.Millisecond + 5*time.Millisecond
	if got := tap.resyncs(); len(got) != 2 || got[1] != want || s.Resyncs != 1 {
		t.Fatalf("resyncs at %v (summary %d), want one relist at %v", got, s.Resyncs, want)
	}
	if ps := tap.published(); len(ps) != 1 || ps[0].Workers != 3 {
		t.Fatalf("publishes %+v, want only the seed's", ps)
	}
	snap := r.Core().Snapshot()
	seen := map[uint64]bool{}
	for _, w := range snap.Workers {
		if seen[w.InstanceID] {
			t.Fatalf("worker %x twice", w.InstanceID)
		}
		seen[w.InstanceID] = true
	}
	if len(seen) != 3 {
		t.Fatalf("%d workers after the relist", len(seen))
	}
	for _, out := range tap.outs {
		switch out.(type) {
		case events.KVUnsubscribed, events.KVDisconnected:
			t.Fatalf("the relist touched a subscription: %+v", out)
		}
	}
	if s.Served != 240 {
		t.Fatalf("summary %+v", s)
	}
}

// A living worker whose lease lapses leaves discovery after
// discovery_delay and the router stops following its publishers; its
// requests still finish. It registers again under a new lease, so a new
// instance id, and is picked again.
func TestLeaseExpiryAndReregistration(t *testing.T) {
	r, s, tap := runTapped(t, `
seed: 8
picker: kv
fleet:
  - {role: aggregated, count: 2}
workload:
  poisson: {rate: 30, count: 240, prompt: {min: 100, max: 400}, output: {min: 16, max: 32}}
faults:
  - {at: 1s, worker: 0, kind: lease_expiry, duration: 2s}
`, Options{})
	const gone, back = time.Second + 5*time.Millisecond, 3*time.Second + 5*time.Millisecond
	if s.Failed != 0 || s.Served != 240 {
		t.Fatalf("summary %+v: a lapsed lease failed requests", s)
	}
	if tap.workersAt(gone-time.Millisecond) != 2 || tap.workersAt(gone) != 1 || tap.workersAt(back) != 2 {
		t.Fatalf("workers before %d, after the lapse %d, after re-registering %d",
			tap.workersAt(gone-time.Millisecond), tap.workersAt(gone), tap.workersAt(back))
	}
	newID := r.workers[0].id
	var oldID uint64
	for _, sel := range tap.selections {
		at := sel.At.Sub(Epoch)
		id := sel.Sel.Decode.WorkerID
		switch {
		case at < time.Second && id != r.workers[1].id:
			oldID = id
		case at >= gone && at < back && id != r.workers[1].id:
			t.Fatalf("picked %x at %v while worker 0 was unregistered", id, at)
		}
	}
	if oldID == 0 || oldID == newID {
		t.Fatalf("worker 0 registered again as %x, it was %x", newID, oldID)
	}
	picked := false
	for _, sel := range tap.selections {
		picked = picked || sel.At.Sub(Epoch) > back && sel.Sel.Decode.WorkerID == newID
	}
	if !picked {
		t.Fatal("worker 0 was not picked under its new lease")
	}
	var unsub, resub int
	kvPub := r.workers[0].kvPub.id
	for _, out := range tap.outs {
		switch e := out.(type) {
		case events.KVUnsubscribed:
			if e.PublisherID == kvPub && e.At.Sub(Epoch) == gone {
				unsub++
			}
		case events.KVSubscribed:
			if e.PublisherID == kvPub && e.At.Sub(Epoch) == back {
				resub++
			}
		}
	}
	if unsub != 1 || resub != 1 {
		t.Fatalf("kv-events: %d unsubscriptions at the lapse, %d subscriptions at the return", unsub, resub)
	}
}

// seqOf reads a kv_metrics message's sequence number.
func seqOf(frames [][]byte) uint64 { return binary.BigEndian.Uint64(frames[2]) }

// publishLog remembers when each worker published each load sample.
type publishLog struct {
	countingObserver
	at map[string][]time.Duration
}

func (p *publishLog) Load(at time.Duration, worker string, used uint64) {
	p.at[worker] = append(p.at[worker], at)
}

// Under degrade every message from the worker's publishers arrives delay
// later or is lost (a sequence gap at the router, as real loss), a stream
// is never reordered (not even when heal shortens the path under messages
// still in flight), and heal ends it.
func TestDegradeDelaysAndLosesWithoutReordering(t *testing.T) {
	for _, tc := range []struct {
		degrade string
		lat     time.Duration
		loss    bool
	}{
		{"delay: 100ms", 101 * time.Millisecond, false},
		{"delay: 30ms, loss: 0.3", 31 * time.Millisecond, true},
	} {
		obs := &publishLog{at: map[string][]time.Duration{}}
		r, s, tap := runTapped(t, `
seed: 17
picker: kv
fleet:
  - {role: aggregated, count: 2}
network: {load_delay: 1ms}
workload:
  poisson: {rate: 40, count: 400, prompt: {min: 100, max: 400}, output: {min: 16, max: 48}}
faults:
  - {at: 2s, worker: 0, kind: degrade, `+tc.degrade+`}
  - {at: 6s, worker: 0, kind: heal}
`, Options{Observer: obs})
		pub := r.workers[0].pub.id
		published := obs.at[r.workers[0].label]
		var last uint64
		var inWindow, lost, overtaken int
		for _, out := range tap.outs {
			la, ok := out.(core.LoadApplied)
			if !ok || la.Msg.PublisherID != pub {
				continue
			}
			seq := seqOf(la.Msg.Frames)
			if seq <= last {
				t.Fatalf("%s: sequence %d arrived after %d", tc.degrade, seq, last)
			}
			for missing := last + 1; missing < seq; missing++ {
				if at := published[missing-1]; at < 2*time.Second || at >= 6*time.Second {
					t.Fatalf("%s: sample %d published at %v, outside the degrade, was lost", tc.degrade, missing, at)
				}
				lost++
			}
			last = seq
			sent := published[seq-1]
			lat := la.Msg.At.Sub(Epoch) - sent
			switch {
			case sent >= 2*time.Second && sent < 6*time.Second:
				inWindow++
				if lat != tc.lat {
					t.Fatalf("%s: sample %d sent at %v took %v over the degraded link, want %v", tc.degrade, seq, sent, lat, tc.lat)
				}
			case sent < 2*time.Second || sent >= 6*time.Second+tc.lat:
				if lat != time.Millisecond {
					t.Fatalf("%s: sample %d sent at %v took %v, want 1ms", tc.degrade, seq, sent, lat)
				}
			case lat > time.Millisecond:
				overtaken++ // sent after heal, queued behind the degraded ones
			}
		}
		if inWindow < 50 || tc.loss != (lost > 0) || tc.loss != (s.DegradeLost > 0) {
			t.Fatalf("%s: %d samples arrived and %d were lost during the degrade (summary: %d)", tc.degrade, inWindow, lost, s.DegradeLost)
		}
		if !tc.loss && overtaken == 0 {
			t.Fatalf("%s: no sample was sent while degraded ones were in flight; the test proves no ordering", tc.degrade)
		}
		if !tc.loss {
			continue
		}
		if frac := float64(lost) / float64(lost+inWindow); frac < 0.15 || frac > 0.45 {
			t.Fatalf("%s: lost %.2f of the degraded samples, want about 0.3", tc.degrade, frac)
		}
		if r.Core().KVResults()["gap"] == 0 {
			t.Fatalf("%s: no kv-events gap under loss: %v", tc.degrade, r.Core().KVResults())
		}
	}
}

// A slow shim delays every request's hop; a failing one answers 500 to
// requests dispatched while it fails, which end failed without reaching a
// worker and release what their pick charged; shim_recover ends both.
func TestShimFaults(t *testing.T) {
	r, s, tap := runTapped(t, `
seed: 4
fleet:
  - {role: aggregated, count: 2}
router: {kv: {track_active_blocks: true, track_prefill_tokens: true}}
workload:
  poisson: {rate: 40, count: 240, prompt: {min: 100, max: 200}, output: {min: 2, max: 4}}
faults:
  - {at: 1s, kind: shim_slow, delay: 80ms}
  - {at: 2s, kind: shim_recover}
  - {at: 3s, kind: shim_fail}
  - {at: 4s, kind: shim_recover}
`, Options{})
	arrival := map[uint64]time.Duration{}
	for _, sel := range tap.selections {
		arrival[sel.RequestID] = sel.At.Sub(Epoch)
	}
	ended := map[uint64]bool{}
	failed := 0
	for _, out := range tap.outs {
		switch o := out.(type) {
		case core.Ended:
			if o.Reason == "failed" {
				ended[o.RequestID] = true
			}
		case core.Outcome:
			at := arrival[o.RequestID]
			inFail := at >= 3*time.Second && at < 4*time.Second
			if inFail != (o.Status == "failed") {
				t.Fatalf("request picked at %v: %s (%s)", at, o.Status, o.Error)
			}
			if o.Status == "failed" {
				failed++
				if o.Error != ShimFailure || !ended[o.RequestID] || o.OutputTokens != 0 {
					t.Fatalf("failed outcome %+v (ended before it: %v)", o, ended[o.RequestID])
				}
				continue
			}
			slow := at >= time.Second && at < 2*time.Second
			if slow != (o.TTFT >= 80*time.Millisecond) {
				t.Fatalf("request picked at %v: TTFT %v", at, o.TTFT)
			}
		}
	}
	if failed == 0 || failed != s.Failed {
		t.Fatalf("%d shim failures, summary %+v", failed, s)
	}
	if n := r.Core().Active().Len(); n != 0 {
		t.Fatalf("%d requests still held in the core's account", n)
	}
}

// A reload hands every replica's core the merged settings at its time:
// picks after it follow the new picker, the recording holds the change,
// and turning KV-aware selection on starts the kv-events subscriptions.
func TestReloadSwapsThePickerOnEveryReplica(t *testing.T) {
	r, _, tap := runTapped(t, `
seed: 14
fleet:
  - {role: aggregated, count: 3}
router: {replicas: 2, max_staleness: 3s}
workload:
  shared_prefix: {groups: 3, users_per_group: 4, system_tokens: 1024, question_tokens: 64, output: {min: 4, max: 8}, rate: 20, count: 200}
faults:
  - {at: 3s, kind: reload, router: {picker: kv, kv: {overlap_score_credit: 0.5}}}
`, Options{})
	var changes []core.ConfigChanged
	subscribed := 0
	for _, out := range tap.outs {
		switch o := out.(type) {
		case core.ConfigChanged:
			changes = append(changes, o)
		case events.KVSubscribed:
			if o.At.Sub(Epoch) != 3*time.Second {
				t.Fatalf("kv-events subscribed at %v", o.At.Sub(Epoch))
			}
			subscribed++
		}
	}
	if len(changes) != 1 || changes[0].At.Sub(Epoch) != 3*time.Second || changes[0].Picker != "kv" ||
		changes[0].KV.OverlapScoreCredit != 0.5 || changes[0].MaxStaleness != 3*time.Second {
		t.Fatalf("configuration changes %+v", changes)
	}
	if subscribed != 3 || tap.kinds["kv"] == 0 {
		t.Fatalf("%d kv-events subscriptions, %d kv-events messages", subscribed, tap.kinds["kv"])
	}
	for i, c := range r.Cores() {
		if c.Settings().Picker != "kv" {
			t.Fatalf("replica %d runs %q", i, c.Settings().Picker)
		}
	}
	before, after := map[string]int{}, map[string]int{}
	for _, sel := range tap.selections {
		if sel.At.Sub(Epoch) < 3*time.Second {
			before[sel.Sel.DecodeReason]++
		} else {
			after[sel.Sel.DecodeReason]++
		}
	}
	if len(before) == 0 || len(after) == 0 {
		t.Fatalf("reasons before %v after %v", before, after)
	}
	for reason := range before {
		if after[reason] > 0 && reason != "only candidate" {
			t.Fatalf("reason %q both before and after the reload: %v / %v", reason, before, after)
		}
	}
}

func TestNewFaultsAreValidatedWithTheirPaths(t *testing.T) {
	base := "fleet: [{role: aggregated, count: 2}]\nworkload: {poisson: {rate: 1, count: 1, prompt: {min: 1, max: 1}, output: {min: 1, max: 1}}}\n"
	for faults, want := range map[string]string{
		"[{at: 1s, kind: etcd_restart, duration: -1s}]":                                 "faults[0].duration: must be > 0",
		"[{at: 1s, kind: shim_fail}, {at: 2s, worker: 0, kind: shim_slow, delay: 1ms}]": "faults[1].worker: shim faults name no worker",
		"[{at: 1s, kind: shim_slow}]":                                                   "faults[0].delay: must be > 0",
		"[{at: 1s, worker: 1, kind: degrade, loss: 1}]":                                 "faults[0].loss: must be in [0, 1)",
		"[{at: 1s, worker: 1, kind: degrade}]":                                          "faults[0].delay: degrade needs delay > 0 or loss > 0",
		"[{at: 1s, worker: 1, kind: kill, delay: 1s}]":                                  "faults[0].delay: only for degrade and shim_slow",
		"[{at: 1s, worker: 1, kind: lease_expiry, duration: -2s}]":                      "faults[0].duration: must be >= 0",
		"[{at: 1s, worker: 1, kind: stall, duration: 2s}]":                              "faults[0].duration: only for etcd_restart and lease_expiry",
		"[{at: 1s, kind: reload}]":                                                      "faults[0].router: required for reload",
		"[{at: 1s, kind: reload, router: {picker: fastest}}]":                           "faults[0].router.picker: unknown picker",
		"[{at: 1s, kind: reload, router: {kv: {overlap_score_credit: 2}}}]":             "faults[0].router.kv: overlap_score_credit",
		"[{at: 1s, worker: 0, kind: reload, router: {picker: kv}}]":                     "faults[0].worker: reload names no worker",
		"[{at: 1s, kind: etcd_compaction, worker: 1}]":                                  "faults[0].worker: etcd faults name no worker",
		"[{at: 1s, worker: 0, kind: stall, router: {picker: kv}}]":                      "faults[0].router: only for reload",
	} {
		_, err := ParseScenario([]byte(base + "faults: " + faults + "\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", faults, err, want)
		}
	}
	for _, kind := range []string{"etcd_restart", "etcd_compaction", "lease_expiry"} {
		_, err := ParseScenario([]byte(base + "discovery: {source: kubernetes}\nfaults: [{at: 1s, worker: 0, kind: " + kind + "}]\n"))
		if err == nil || !strings.Contains(err.Error(), "faults[0].kind: "+kind+" needs etcd discovery") {
			t.Errorf("%s under kubernetes: %v", kind, err)
		}
	}
}

// The new faults render into the scenario a recording keeps and parse
// back to the same scenario (a fleet-wide fault without a worker).
func TestNewFaultsRoundTripThroughYAML(t *testing.T) {
	sc := scenario(t, threeWorkers+`
faults:
  - {at: 1s, kind: etcd_restart}
  - {at: 2s, kind: etcd_compaction}
  - {at: 3s, worker: 1, kind: lease_expiry, duration: 1s}
  - {at: 4s, worker: 2, kind: degrade, delay: 5ms, loss: 0.1}
  - {at: 5s, worker: 2, kind: heal}
  - {at: 6s, kind: shim_slow, delay: 20ms}
  - {at: 7s, kind: shim_fail}
  - {at: 8s, kind: shim_recover}
  - {at: 9s, kind: reload, router: {picker: round_robin, max_staleness: 2s, kv: {router_temperature: 0.5, conditional_disaggregation: {enabled: true}}}}
`)
	text := sc.YAML()
	again, err := ParseScenario([]byte(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if again.YAML() != text {
		t.Fatalf("renders differently after a round trip:\n%s\n---\n%s", text, again.YAML())
	}
	if sc.Faults[0].Duration.Std() != DefaultEtcdOutage || strings.Contains(text, "worker: 0") {
		t.Fatalf("etcd_restart's default duration or a fleet-wide worker:\n%s", text)
	}
	// Faults without the new fields render none of them.
	plain := scenario(t, threeWorkers+"faults: [{at: 1s, worker: 1, kind: kill}]\n").YAML()
	plain = plain[strings.Index(plain, "\nfaults:"):strings.Index(plain, "\nslo:")]
	for _, field := range []string{"duration:", "delay:", "loss:", "router:"} {
		if strings.Contains(plain, field) {
			t.Fatalf("%q rendered for a fault without it:\n%s", field, plain)
		}
	}
	if !strings.Contains(plain, "worker: 1") {
		t.Fatalf("the kill lost its worker:\n%s", plain)
	}
}
