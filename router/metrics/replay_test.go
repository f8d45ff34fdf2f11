package metrics

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"switchyard/router/eventplane/replay"
)

// The replay series are pre-registered and closed; a refusal counts both
// as a refused replay and under its reason.
func TestKVReplaySeries(t *testing.T) {
	s := New()
	f := &replay.Fetcher{Counts: s.KVReplay}
	if _, err := f.Fetch(context.Background(), "ipc:///not-tcp", 0, nil); err == nil {
		t.Fatal("a non-tcp endpoint was dialed")
	}
	s.KVReplay.Running.Add(2)
	want := `
# HELP switchyard_dynamo_kv_replay_fetch_refused_total KV-event replays refused, by reason (endpoint, protocol, malformed, out_of_order, too_many, timeout).
# TYPE switchyard_dynamo_kv_replay_fetch_refused_total counter
switchyard_dynamo_kv_replay_fetch_refused_total{reason="endpoint"} 1
switchyard_dynamo_kv_replay_fetch_refused_total{reason="malformed"} 0
switchyard_dynamo_kv_replay_fetch_refused_total{reason="out_of_order"} 0
switchyard_dynamo_kv_replay_fetch_refused_total{reason="protocol"} 0
switchyard_dynamo_kv_replay_fetch_refused_total{reason="timeout"} 0
switchyard_dynamo_kv_replay_fetch_refused_total{reason="too_many"} 0
# HELP switchyard_dynamo_kv_replay_fetches_running KV-event replays in progress.
# TYPE switchyard_dynamo_kv_replay_fetches_running gauge
switchyard_dynamo_kv_replay_fetches_running 2
# HELP switchyard_dynamo_kv_replay_fetches_total KV-event replays by how they ended: ended (end marker), stopped (had what it needed), refused, failed (dial, I/O, cancel).
# TYPE switchyard_dynamo_kv_replay_fetches_total counter
switchyard_dynamo_kv_replay_fetches_total{result="ended"} 0
switchyard_dynamo_kv_replay_fetches_total{result="failed"} 0
switchyard_dynamo_kv_replay_fetches_total{result="refused"} 1
switchyard_dynamo_kv_replay_fetches_total{result="stopped"} 0
`
	if err := testutil.GatherAndCompare(s.Registry, strings.NewReader(want),
		"switchyard_dynamo_kv_replay_fetches_total", "switchyard_dynamo_kv_replay_fetch_refused_total", "switchyard_dynamo_kv_replay_fetches_running"); err != nil {
		t.Fatal(err)
	}
}
