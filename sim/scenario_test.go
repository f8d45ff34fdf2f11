package sim

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"switchyard/router/picker"
)

const fleetOnlyYAML = `
seed: 9
fleet:
  - {role: aggregated, count: 3, total_kv_blocks: 512}
network: {load_delay: 3ms, load_loss: 0.1}
slo: {ttft: 750ms}
`

func TestAFleetFileNeedsNoWorkload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(fleetOnlyYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := LoadFleet(path)
	if err != nil {
		t.Fatalf("a fleet file without a workload was refused: %v", err)
	}
	if sc.Seed != 9 || len(sc.Fleet) != 1 || sc.Fleet[0].Count != 3 || sc.Fleet[0].TotalKVBlocks != 512 ||
		sc.Network.LoadDelay.Std() != 3*time.Millisecond || sc.Network.LoadLoss != 0.1 || sc.SLO.TTFT.Std() != 750*time.Millisecond {
		t.Fatalf("fleet file read as %+v", sc)
	}
	if sc.Fleet[0].BlockSize != 64 || sc.Network.RequestDelay == 0 {
		t.Fatalf("defaults not filled: block size %d, request delay %v", sc.Fleet[0].BlockSize, sc.Network.RequestDelay)
	}
	// The full-scenario entry point still requires the workload.
	if _, err := LoadScenario(path); err == nil || !strings.Contains(err.Error(), "workload") {
		t.Fatalf("LoadScenario accepted a file without a workload: %v", err)
	}
}

func TestAFleetFileIsStillValidated(t *testing.T) {
	for name, src := range map[string]string{
		"unknown field": "fleet: [{role: aggregated, count: 1}]\nbogus: 1\n",
		"bad role":      "fleet: [{role: router, count: 1}]\n",
		"no fleet":      "seed: 3\n",
		"bad loss":      "fleet: [{role: aggregated, count: 1}]\nnetwork: {load_loss: 1.5}\n",
	} {
		if _, err := ParseFleet([]byte(src)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// KVParamsOf inverts Options for every setting a live router records.
func TestKVParamsOfRoundTrips(t *testing.T) {
	busy := 0.6
	for _, o := range []picker.KVOptions{
		picker.DefaultKVOptions(),
		{OverlapScoreCredit: 0.5, PrefillLoadScale: 8, Temperature: 0.3, ConditionalDisagg: true, DecodeBusyThreshold: &busy,
			PredictCache: true, PredictedTTL: 5 * time.Second, DecodeActiveRequestWeight: 2, OverlapScoreCreditDecay: 1,
			Track: picker.Tracking{ActiveBlocks: true, PrefillTokens: true, OutputBlocks: true, ExpectedOutputTokens: 64}},
	} {
		if got := KVParamsOf(o).Options(); !reflect.DeepEqual(got, o) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, o)
		}
	}
}
