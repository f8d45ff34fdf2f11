package replay

import (
	"crypto/sha256"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"switchyard/sim"
)

// withoutBrokers are scenarios that touch every subscription path the
// broker transport changed (connects, partitions, heals, kills, publisher
// restarts) without brokers; their digests were taken before brokers
// existed and must not move.
var withoutBrokers = []struct{ name, yaml, digest string }{
	{"kv, partition, heal, kill", "picker: kv\n" + scenarioYAML + "  - {at: 4s, worker: 0, kind: partition}\n" +
		"  - {at: 7s, worker: 0, kind: heal}\n  - {at: 10s, worker: 1, kind: kill}\n",
		"773bc787b89d0115489deb1387c23a1203876ee14832b111f2c3682b8a3a4976"},
}

func TestRunsWithoutBrokersRecordWhatTheyAlwaysDid(t *testing.T) {
	for _, tc := range withoutBrokers {
		got := fmt.Sprintf("%x", sha256.Sum256([]byte(dumpTables(t, record(t, tc.yaml), false))))
		if got != tc.digest {
			t.Errorf("%s: recording digest %s, want %s", tc.name, got, tc.digest)
		}
	}
}

const brokerScenario = "picker: kv\n" + scenarioYAML + `  - {at: 4s, kind: kill_broker, broker: broker-a}
  - {at: 5s, kind: drain_broker, broker: broker-b}
  - {at: 6s, kind: kill_broker, broker: broker-b}
  - {at: 7s, kind: restart_broker, broker: broker-a}
router: {load_transport: broker}
brokers:
  - {id: broker-a, namespaces: [dynamo]}
  - {id: broker-b, namespaces: [dynamo]}
`

// A run through brokers, with broker faults, records the sessions its
// subscriptions lost and regained like any other; it replays exactly, two
// recordings are byte-identical, and another seed records another run.
func TestBrokerRecordingsReplayExactly(t *testing.T) {
	path := record(t, brokerScenario)
	rep, err := Run(open(t, path), 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Selections != 400 || !rep.Exact() || rep.Reproduced != 400 {
		t.Fatalf("report %+v", rep)
	}
	// The counterfactual re-simulates the run with its brokers and faults.
	cf, err := Counterfactual(open(t, path), 0, "round_robin")
	if err != nil {
		t.Fatal(err)
	}
	if cf.Recorded.TTFT != cf.Baseline.TTFT {
		t.Fatalf("the re-simulation differs from the recording:\nrecorded %+v\nbaseline %+v", cf.Recorded.TTFT, cf.Baseline.TTFT)
	}
	a := dump(t, path)
	if b := dump(t, record(t, brokerScenario)); a != b {
		t.Fatal("two recordings of one broker scenario differ")
	}
	if c := dump(t, record(t, strings.Replace(brokerScenario, "seed: 21", "seed: 22", 1))); c == a {
		t.Fatal("another seed recorded the identical run")
	}
	if d := dump(t, record(t, strings.Replace(brokerScenario, "kill_broker, broker: broker-a", "drain_broker, broker: broker-a", 1))); d == a {
		t.Fatal("the broker faults left no trace in the recording")
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var scen string
	if err := db.QueryRow(`SELECT scenario FROM runs`).Scan(&scen); err != nil {
		t.Fatal(err)
	}
	// The broker sessions' effects are inputs like any other: every
	// kv-events stream ends when broker-b dies (broker-a is already dead),
	// and each opens again once broker-a's new session arrives, after its
	// wake jitter and the subscribe delay.
	at := func(d time.Duration) int64 { return sim.Epoch.Add(d).UnixNano() }
	for _, q := range []struct {
		table, kind string
		from, to    time.Duration
		want        int
	}{
		{"kv_messages", "disconnected", 6 * time.Second, 6 * time.Second, 4},
		{"kv_messages", "connected", 7*time.Second + 2*time.Millisecond, 7*time.Second + 502*time.Millisecond, 4},
		{"load_messages", "connected", 7*time.Second + 2*time.Millisecond, 7*time.Second + 502*time.Millisecond, 4},
	} {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM `+q.table+` WHERE kind = ? AND at_ns BETWEEN ? AND ?`,
			q.kind, at(q.from), at(q.to)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != q.want {
			t.Errorf("%s %s between %v and %v: %d rows, want %d", q.table, q.kind, q.from, q.to, n, q.want)
		}
	}
	if !strings.Contains(scen, "kind: kill_broker") || !strings.Contains(scen, "broker: broker-a") || !strings.Contains(scen, "load_transport: broker") {
		t.Fatalf("the recording's scenario does not hold the brokers and their faults:\n%s", scen)
	}
}
