package sim

import (
	"strings"
	"testing"

	"switchyard/router/replicasync"
)

// replicaScenario is a shared-prefix load on four workers under the
// tracked KV picker, small enough for the race detector.
const replicaScenario = `
seed: 5
picker: kv_tracked
fleet:
  - {role: aggregated, count: 4, total_kv_blocks: 512}
workload:
  shared_prefix: {groups: 8, users_per_group: 4, system_tokens: 1024, question_tokens: 64, output: {min: 16, max: 64}, rate: 60, count: 400}
`

func runReplicas(t *testing.T, router string) (*Run, Summary, *textTap) {
	t.Helper()
	sc := scenario(t, replicaScenario+router)
	tap := newTextTap()
	r, err := New(sc, Options{Record: tap})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Execute()
	if err != nil {
		t.Fatal(err)
	}
	return r, s, tap
}

func TestReplicaSettingsAreValidatedWithTheirPaths(t *testing.T) {
	for _, tc := range []struct{ router, want string }{
		{"router: {replicas: -1}", "router.replicas: must be in 1..64"},
		{"router: {replicas: 65}", "router.replicas: must be in 1..64"},
		{"router: {replica_sync: true}", "router.replica_sync: needs router.replicas >= 2"},
		{"router: {replicas: 2, sync_delay: 1ms}", "router: sync_delay and sync_loss apply only with replica_sync: true"},
		{"router: {replicas: 2, replica_sync: true, sync_loss: 1}", "router.sync_loss: must be in [0, 1)"},
		{"router: {replicas: 2, replica_sync: true, sync_delay: -1ms}", "router.sync_delay: must be >= 0"},
	} {
		_, err := ParseScenario([]byte(replicaScenario + tc.router))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.router, err, tc.want)
		}
	}
	sc := scenario(t, replicaScenario+"router: {replicas: 2, replica_sync: true}")
	if sc.Router.SyncDelay.Std() != DefaultSyncDelay {
		t.Fatalf("sync_delay defaults to %v", sc.Router.SyncDelay.Std())
	}
	if y := scenario(t, replicaScenario).YAML(); strings.Contains(y, "replica") || strings.Contains(y, "sync_") {
		t.Fatalf("a scenario without replicas renders replica settings:\n%s", y)
	}
}

// The simulator batches as the live host does.
func TestSyncTimingIsTheLiveHosts(t *testing.T) {
	if SyncBatchDelay != replicasync.MaxBatchDelay || SyncHeartbeat != replicasync.Heartbeat {
		t.Fatalf("sim batches every %v with heartbeats every %v; the live host %v and %v",
			SyncBatchDelay, SyncHeartbeat, replicasync.MaxBatchDelay, replicasync.Heartbeat)
	}
}

// replicas: 1 is the run without the setting, output for output.
func TestOneReplicaIsTheRunWithoutReplicas(t *testing.T) {
	_, a, tapA := runReplicas(t, "")
	_, b, tapB := runReplicas(t, "router: {replicas: 1}")
	if a != b || tapA.sum() != tapB.sum() || tapA.lines != tapB.lines {
		t.Fatalf("replicas: 1 differs from no setting: %+v vs %+v", a, b)
	}
}

// Several replicas split the requests round robin; the first replica's
// core records only what it routed. Without sync no batch is sent; with
// it each replica applies its peers' events, and with loss the gaps show.
func TestReplicasSplitTheRequestsAndSyncTheirAccounts(t *testing.T) {
	run, s, tap := runReplicas(t, "router: {replicas: 4}")
	if s.Served != 400 {
		t.Fatalf("summary %+v", s)
	}
	for _, rs := range run.Replicas() {
		if rs.Routed != 100 || rs.Batches != 0 || rs.Peers != nil {
			t.Fatalf("replica %+v", rs)
		}
	}
	if len(tap.selections) != 100 || tap.kinds["peer"] != 0 {
		t.Fatalf("the first replica recorded %d selections", len(tap.selections))
	}

	run, s, _ = runReplicas(t, "router: {replicas: 4, replica_sync: true, sync_delay: 2ms}")
	if s.Served != 400 {
		t.Fatalf("summary %+v", s)
	}
	for _, rs := range run.Replicas() {
		p := rs.Peers
		// Each of a replica's requests is added, gets its first token and
		// ends: three events, every one applied by each of three peers,
		// but for the last request's, still on their way when the run
		// stops.
		if rs.Events < 297 || rs.Events > 300 || rs.Lost != 0 || p == nil || p.Peers != 3 || p.Events < 897 || p.Gaps != 0 ||
			len(p.Refused) != 0 || p.Requests > 1 {
			t.Fatalf("replica %+v, peers %+v", rs, p)
		}
	}

	run, _, _ = runReplicas(t, "router: {replicas: 4, replica_sync: true, sync_loss: 0.2}")
	var lost, gaps uint64
	for _, rs := range run.Replicas() {
		lost += rs.Lost
		gaps += rs.Peers.Gaps
	}
	if lost == 0 || gaps == 0 || gaps > lost {
		t.Fatalf("lost %d deliveries, %d gaps seen", lost, gaps)
	}
}

// Runs of several synced replicas are deterministic; the peers' batches
// change the first replica's picks, and the seed changes the run.
func TestReplicaRunsAreDeterministicAndSyncMovesPicks(t *testing.T) {
	const synced = "router: {replicas: 4, replica_sync: true, sync_loss: 0.1}"
	_, a, tapA := runReplicas(t, synced)
	_, b, tapB := runReplicas(t, synced)
	if a != b || tapA.sum() != tapB.sum() {
		t.Fatal("two runs of one scenario with replicas differ")
	}
	if tapA.kinds["peer"] == 0 {
		t.Fatalf("no peer batch recorded: %v", tapA.kinds)
	}
	_, _, unsynced := runReplicas(t, "router: {replicas: 4}")
	differ := 0
	for i, s := range tapA.selections {
		if s.Sel.Decode != unsynced.selections[i].Sel.Decode {
			differ++
		}
	}
	if differ == 0 {
		t.Fatal("replica sync changed none of the first replica's picks")
	}
	sc := scenario(t, replicaScenario+synced)
	sc.Seed++
	_, c := execute(t, sc, Options{})
	if c.sum() == tapA.sum() {
		t.Fatal("another seed produced the identical run")
	}
}
