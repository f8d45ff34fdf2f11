package sim

import (
	"strings"
	"testing"
	"time"

	"switchyard/router/core"
	"switchyard/scenario/expect"
)

const linkScenario = `
seed: 17
picker: kv
fleet:
  - {role: aggregated, count: 4}
workload:
  shared_prefix: {groups: 4, users_per_group: 8, system_tokens: 1024, question_tokens: 128, output: {min: 8, max: 32}, rate: 40, count: 400}
`

func collected(t *testing.T, src string) (Summary, *expect.Evidence) {
	t.Helper()
	r, err := New(scenario(t, src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	col := expect.NewCollector(Epoch, r.WorkerIDs(), expect.SLO{})
	r.opts.Record = col
	for _, c := range r.cores {
		c.SetPort(col)
	}
	s, err := r.Execute()
	if err != nil {
		t.Fatal(err)
	}
	return s, col.Evidence()
}

var _ core.Port = (*expect.Collector)(nil)

// One subscription is one connection, which delivers in order: jitter
// delays messages but never lets one overtake another, so jitter alone
// shows the router no gap.
func TestJitterKeepsEachStreamInOrder(t *testing.T) {
	s, ev := collected(t, linkScenario+"network: {load_jitter: 5ms}\n")
	if s.LoadMessages == 0 || s.KVMessages == 0 {
		t.Fatalf("no messages: %+v", s)
	}
	end := 24 * time.Hour
	for _, name := range []string{"load.gap", "load.duplicate", "kv.gap", "kv.replay"} {
		if n := ev.Count(name, 0, end); n != 0 {
			t.Errorf("%s counted %d times under jitter alone", name, n)
		}
	}
}

// Random link failures break each worker's connections now and then: the
// router's sessions end and come back after the outage, and what was sent
// meanwhile is lost, which the router sees as gaps. The same seed fails
// the same links at the same times.
func TestLinkFailuresDisconnectAndResubscribe(t *testing.T) {
	src := linkScenario + "network: {link_failures: {mean_interval: 3s, outage: 400ms}}\n"
	s, ev := collected(t, src)
	end := 24 * time.Hour
	if s.LinkFailures < 4 {
		t.Fatalf("%d link failures over %v with a 3s mean interval and 4 workers", s.LinkFailures, s.Virtual)
	}
	if got := ev.Count("kv_session.disconnected", 0, end); got != int(s.LinkFailures) {
		t.Errorf("%d kv-events sessions ended for %d link failures", got, s.LinkFailures)
	}
	if ev.Count("kv_session.connected", 0, end) <= int(s.LinkFailures) {
		t.Error("the sessions did not come back after the outages")
	}
	if ev.Count("kv.gap", 0, end)+ev.Count("load.gap", 0, end) == 0 {
		t.Error("nothing sent during an outage was missed")
	}
	if s.Served != s.Requests {
		t.Errorf("served %d of %d: a link failure touches the event plane only", s.Served, s.Requests)
	}
	again, _ := collected(t, src)
	if again != s {
		t.Errorf("the same seed ran differently: %+v vs %+v", again, s)
	}
}

func TestLinkFailuresAreValidated(t *testing.T) {
	_, err := ParseScenario([]byte(linkScenario + "network: {link_failures: {mean_interval: 0s, outage: -1s}}\n"))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"network.link_failures.mean_interval: must be at least 1ms", "network.link_failures.outage: must be >= 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}
