package replay

import (
	"crypto/sha256"
	"fmt"
	"testing"
)

// singleReplicaScenarios are recorded by one router replica; their
// recordings' digests were taken before the simulator could run several
// replicas, and must not move: one replica (the setting left out, or
// replicas: 1) is exactly the run it always was.
var singleReplicaScenarios = []struct{ name, yaml, digest string }{
	{"load, faults", "picker: load\n" + scenarioYAML, "7d043b6e71e35ef9a639dcb350aadc3b8d85f097dadab03b0813571bf8082306"},
	{"kv", "picker: kv\n" + scenarioYAML, "b5d9c5701c6ef8cdf707413c927810938c03e54b1395c20808ea3006926f4230"},
	{"kv tracked, output blocks", "picker: kv\nrouter:\n  kv: {track_prefill_tokens: true, track_active_blocks: true, " +
		"track_output_blocks: true, expected_output_tokens: 48}\n" + scenarioYAML, "a096d9a24d2470ad42b8ba32fa84624071da006077d4f87e5931372f4cce7050"},
}

func TestOneReplicaRecordsWhatItAlwaysDid(t *testing.T) {
	for _, tc := range singleReplicaScenarios {
		got := fmt.Sprintf("%x", sha256.Sum256([]byte(dumpTables(t, record(t, tc.yaml), false))))
		if got != tc.digest {
			t.Errorf("%s: recording digest %s, want %s", tc.name, got, tc.digest)
		}
	}
}
