package live

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/recorder"
	"switchyard/router/picker"
	"switchyard/router/server"
	"switchyard/sim"
	"switchyard/sim/replay"
)

// killScenario: two aggregated workers, 30 Poisson requests over about
// 15 s of scenario time, worker 0 killed at 2 s. Run at TimeScale 2 it
// takes about 8 s of wall time.
const killScenario = `
name: live-kill
seed: 7
fleet:
  - role: aggregated
    count: 2
    block_size: 16
    total_kv_blocks: 2048
network:
  lease_ttl: 2s
workload:
  poisson:
    rate: 2
    count: 30
    prompt: {min: 32, max: 256}
    output: {min: 4, max: 24}
faults:
  - {at: 2s, worker: 0, kind: kill}
`

func testLog(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// TestRunRecordsAKilledWorkerLeaving runs a scenario live on real etcd,
// fleet, frontend and router, and reads the router's recording: one
// Request and one Outcome per request sent, selections that pin only
// fleet workers, and none of the killed worker once its lease has lapsed.
func TestRunRecordsAKilledWorkerLeaving(t *testing.T) {
	sc, err := sim.ParseScenario([]byte(killScenario))
	require.NoError(t, err)
	require.NoError(t, Supported(sc))
	path := filepath.Join(t.TempDir(), "live.db")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	info, err := Run(ctx, sc, Options{RecordPath: path, Log: testLog(t), TimeScale: 2})
	require.NoError(t, err)
	require.Empty(t, info.Unsupported)
	require.Equal(t, 30, info.Requests)
	require.Len(t, info.Results, 30)
	require.Len(t, info.WorkerIDs, 2)
	require.NotEqual(t, info.WorkerIDs[0], info.WorkerIDs[1])
	require.Positive(t, info.LeaseTTL)
	require.Len(t, info.Faults, 1)
	kill := info.Faults[0]
	require.Empty(t, kill.Err)
	require.Equal(t, info.WorkerIDs[0], kill.WorkerID)
	// 2 s of scenario time at scale 2 (a busy machine may be late, never early).
	require.False(t, kill.At.Before(info.Start.Add(time.Second)))
	require.WithinDuration(t, info.Start.Add(time.Second), kill.At, 5*time.Second)
	// Arrivals keep to the scaled schedule: the last of 30 requests at
	// rate 2/s lands well after the first few seconds of wall time.
	require.True(t, info.Results[29].Sent.After(kill.At))

	r, err := recorder.Open(path)
	require.NoError(t, err)
	defer r.Close()
	runs, err := r.Runs()
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, info.RunID, runs[0].ID)
	require.Equal(t, "live", runs[0].Kind)
	require.Equal(t, picker.NameLoad, runs[0].Picker)
	require.Contains(t, runs[0].Scenario, "live-kill", "the recording carries the scenario")
	require.False(t, runs[0].EndedAt.IsZero(), "the router closed its recording")
	require.Empty(t, runs[0].Dropped)

	var (
		requests   []uint64
		outcomes   = map[uint64]recorder.Outcome{}
		selections []recorder.Selection
	)
	require.NoError(t, r.Entries(info.RunID, func(e recorder.Entry) error {
		switch v := e.Value.(type) {
		case recorder.Request:
			requests = append(requests, v.RequestID)
		case recorder.Selection:
			selections = append(selections, v)
		case recorder.Outcome:
			if _, dup := outcomes[v.RequestID]; dup {
				return errors.New("two outcomes for one request")
			}
			outcomes[v.RequestID] = v
		}
		return nil
	}))
	require.Len(t, requests, info.Requests, "one recorded Request per request sent")
	require.Len(t, outcomes, info.Requests, "one recorded Outcome per request sent")
	for _, id := range requests {
		require.Contains(t, outcomes, id)
	}

	killed := info.WorkerIDs[0]
	// The lease lapses LeaseTTL after the kill; etcd checks for expired
	// leases twice a second, and a busy machine may be slower still.
	cutoff := kill.At.Add(info.LeaseTTL + 3*time.Second)
	after := 0
	for _, s := range selections {
		require.True(t, s.OK, "every request found a worker")
		require.Contains(t, info.WorkerIDs, s.Sel.Decode.WorkerID)
		require.False(t, s.Sel.HasPrefill, "an aggregated fleet")
		if s.At.After(cutoff) {
			after++
			require.NotEqual(t, killed, s.Sel.Decode.WorkerID, "picked the killed worker %s after its lease lapsed", s.At.Sub(kill.At))
			require.Equal(t, recorder.StatusOK, outcomes[s.RequestID].Status, "served by the survivor")
		}
	}
	t.Logf("lease TTL %s granted; %d of %d selections after the lease lapsed", info.LeaseTTL, after, len(selections))
	require.Positive(t, after, "some requests arrive after the killed worker left discovery")
	ok := 0
	for _, o := range outcomes {
		if o.Status == recorder.StatusOK {
			ok++
			require.Positive(t, o.TTFT, "streamed, so the router timed the first token")
		}
	}
	require.GreaterOrEqual(t, ok, info.Requests/2)
	for _, res := range info.Results {
		if res.Err == "" {
			require.Equal(t, 200, res.Status)
			require.Positive(t, res.Events)
		}
	}
}

// TestSupportedNamesWhatCannotRunLive refuses a partition fault and
// brokers, each named, and Run refuses the same scenario before starting
// anything.
func TestSupportedNamesWhatCannotRunLive(t *testing.T) {
	partition := killScenario + "  - {at: 4s, worker: 1, kind: partition}\n  - {at: 5s, worker: 1, kind: heal}\n"
	sc, err := sim.ParseScenario([]byte(partition))
	require.NoError(t, err)
	err = Supported(sc)
	var ue *UnsupportedError
	require.ErrorAs(t, err, &ue)
	require.ErrorIs(t, err, ErrUnsupported)
	require.Len(t, ue.Reasons, 2)
	require.Contains(t, ue.Reasons[0], "faults[1] partition")
	require.Contains(t, ue.Reasons[1], "faults[2] heal")

	info, err := Run(context.Background(), sc, Options{RecordPath: filepath.Join(t.TempDir(), "x.db")})
	require.ErrorIs(t, err, ErrUnsupported)
	require.Equal(t, ue.Reasons, info.Unsupported)
	require.Zero(t, info.Requests)

	brokers := strings.Replace(killScenario, "network:", `router:
  load_transport: broker
brokers:
  - {id: broker-a, namespaces: [dynamo]}
network:`, 1) + "  - {at: 4s, broker: broker-a, kind: kill_broker}\n"
	sc, err = sim.ParseScenario([]byte(brokers))
	require.NoError(t, err)
	require.ErrorAs(t, Supported(sc), &ue)
	require.Len(t, ue.Reasons, 2)
	require.Contains(t, ue.Reasons[0], "brokers")
	require.Contains(t, ue.Reasons[1], "faults[1] kill_broker")

	other := strings.Replace(killScenario, "name: live-kill", "name: other\npicker: round_robin\nrouter:\n  replicas: 2", 1)
	other = strings.Replace(other, "count: 30", "count: 30\n    output: {min: 4, max: 5000}", 1)
	other = strings.Replace(other, "    output: {min: 4, max: 24}\n", "", 1)
	sc, err = sim.ParseScenario([]byte(other))
	require.NoError(t, err)
	require.ErrorAs(t, Supported(sc), &ue)
	joined := strings.Join(ue.Reasons, "\n")
	for _, want := range []string{"router.replicas 2", "picker round_robin", "output tokens"} {
		require.Contains(t, joined, want)
	}
}

// The router's configuration carries the scenario's picker and router
// settings: kv turns dynamo.kv on, its knobs reach the core as the
// simulator sets them (tracking switches off unless set, unlike the
// configuration's Dynamo defaults), max_staleness reaches dynamo.load.
func TestRouterConfigMapsTheScenario(t *testing.T) {
	sc, err := sim.ParseScenario([]byte(strings.Replace(killScenario, "name: live-kill", `name: kv
picker: kv
namespace: graph-a
model: acme/m
router:
  max_staleness: 750ms
  kv:
    overlap_score_credit: 0.5
    router_temperature: 0.25
    use_kv_events: false
    predicted_block_ttl: 30s
    track_output_blocks: true
    conditional_disaggregation: {enabled: true, decode_busy_threshold: 0.6}`, 1)))
	require.NoError(t, err)
	cfg, err := routerConfig(sc, "tok", "http://127.0.0.1:2379", "http://127.0.0.1:9")
	require.NoError(t, err)
	require.Equal(t, picker.NameKV, server.PickerName(cfg))
	k := cfg.Dynamo.KV
	require.Equal(t, 0.5, k.OverlapScoreCredit)
	require.Equal(t, 0.25, k.RouterTemperature)
	require.False(t, k.UseKVEvents)
	require.Equal(t, 30*time.Second, k.PredictedBlockTTL.Std())
	require.True(t, k.TrackOutputBlocks)
	require.False(t, k.TrackActiveBlocks)
	require.False(t, k.TrackPrefillTokens)
	require.Equal(t, 0.6, *k.ConditionalDisaggregation.DecodeBusyThreshold)
	require.Equal(t, 750*time.Millisecond, cfg.Dynamo.Load.MaxStaleness.Std())
	require.Equal(t, "graph-a", cfg.Dynamo.Discovery.Etcd.Namespace)
	require.True(t, slices.Contains(cfg.Backends[0].Models, "acme/m"))
	errs, _ := cfg.Validate()
	require.Empty(t, errs)

	sc, err = sim.ParseScenario([]byte(killScenario))
	require.NoError(t, err)
	cfg, err = routerConfig(sc, "tok", "http://127.0.0.1:2379", "http://127.0.0.1:9")
	require.NoError(t, err)
	require.Equal(t, picker.NameLoad, server.PickerName(cfg))
}

func TestLeaseSeconds(t *testing.T) {
	require.EqualValues(t, 10, leaseSeconds(10*time.Second, 1))
	require.EqualValues(t, 5, leaseSeconds(10*time.Second, 2))
	require.EqualValues(t, 1, leaseSeconds(time.Second, 4), "at least a second")
	require.EqualValues(t, 2, leaseSeconds(1500*time.Millisecond, 1), "rounded up")
}

// disaggScenario: two prefill and two decode workers under the kv picker,
// a shared-prefix workload, and every fault kind a live run injects.
const disaggScenario = `
name: live-disagg-kv
seed: 11
picker: kv
fleet:
  - role: prefill
    count: 2
    block_size: 16
    total_kv_blocks: 4096
  - role: decode
    count: 2
    block_size: 16
    total_kv_blocks: 4096
    kv_transfer_bandwidth: 2e10
workload:
  shared_prefix:
    groups: 2
    users_per_group: 4
    system_tokens: 256
    question_tokens: 32
    output: {min: 4, max: 16}
    rate: 4
    count: 24
faults:
  - {at: 1s, worker: 0, kind: gap}
  - {at: 1s, worker: 0, kind: drop, count: 2}
  - {at: 1s, worker: 1, kind: malformed}
  - {at: 1s, worker: 2, kind: malformed_record}
  - {at: 1s, worker: 3, kind: restart_publisher}
  - {at: 1500ms, worker: 2, kind: stall}
  - {at: 1500ms, worker: 3, kind: slow, factor: 3}
  - {at: 2s, worker: 1, kind: fail}
  - {at: 2500ms, worker: 2, kind: resume}
  - {at: 3s, worker: 1, kind: recover}
  - {at: 3s, worker: 3, kind: recover}
  - {at: 3500ms, worker: 0, kind: reset}
`

// TestRunDisaggregatedKVWithFaults runs a disaggregated fleet under the kv
// picker live: every fault reaches the fleet, prefill pins name prefill
// workers and decode pins decode workers, the router records the prompts'
// token ids and applies the workers' KV events, and the recording
// replays exactly.
func TestRunDisaggregatedKVWithFaults(t *testing.T) {
	sc, err := sim.ParseScenario([]byte(disaggScenario))
	require.NoError(t, err)
	require.NoError(t, Supported(sc))
	path := filepath.Join(t.TempDir(), "live.db")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	info, err := Run(ctx, sc, Options{RecordPath: path, Log: testLog(t), TimeScale: 2})
	require.NoError(t, err)
	require.Equal(t, sc.ExpectedRequests(), info.Requests)
	require.Len(t, info.WorkerIDs, 4)
	require.Len(t, info.Faults, len(sc.Faults))
	for _, f := range info.Faults {
		require.Empty(t, f.Err, "%s on worker %d", f.Kind, f.Worker)
		require.Equal(t, info.WorkerIDs[f.Worker], f.WorkerID)
	}
	prefills, decodes := info.WorkerIDs[:2], info.WorkerIDs[2:]

	r, err := recorder.Open(path)
	require.NoError(t, err)
	defer r.Close()
	var (
		requests, outcomes, withTokens int
		kvResults                      = map[string]int{}
	)
	require.NoError(t, r.Entries(info.RunID, func(e recorder.Entry) error {
		switch v := e.Value.(type) {
		case recorder.Request:
			requests++
			if uint64(len(v.Tokens)) == v.PromptTokens && len(v.Tokens) > 0 {
				withTokens++
			}
		case recorder.Selection:
			if v.OK {
				require.Contains(t, decodes, v.Sel.Decode.WorkerID)
				if v.Sel.HasPrefill {
					require.Contains(t, prefills, v.Sel.Prefill.WorkerID)
				}
			}
		case recorder.Outcome:
			outcomes++
		case recorder.KVMessage:
			kvResults[v.Result]++
		}
		return nil
	}))
	t.Logf("requests %d, outcomes %d, with token ids %d, kv-events results %v", requests, outcomes, withTokens, kvResults)
	require.Equal(t, info.Requests, requests)
	require.Equal(t, info.Requests, outcomes)
	require.Equal(t, requests, withTokens, "every prompt went as token ids the router read")
	require.Positive(t, kvResults["applied"], "the workers' KV events reached the index")

	rep, err := replay.Run(r, info.RunID, "")
	require.NoError(t, err)
	require.Equal(t, picker.NameKV, rep.Recorded)
	require.True(t, rep.Exact(), "divergences %+v, kv result mismatches %d, load %d, generations %d",
		rep.Divergences, rep.KVResultMismatches, rep.LoadResultMismatches, rep.GenerationMismatches)
}
