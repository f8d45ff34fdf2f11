package workload

import (
	"encoding/json"
	"reflect"
	"testing"
)

var traceLineSeeds = []string{
	`{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48, 49]}`,
	`{"hash_ids":[],"output_length":0,"input_length":0,"timestamp":0}`,
	` { "timestamp" : -0 , "input_length":1,"output_length":2,"hash_ids":[ 0 ,18446744073709551615] } `,
	`{"timestamp": 1, "input_length": 2, "output_length": 3, "hash_ids": [1], "extra": 4}`,
	`{"timestamp": 1, "timestamp": 2, "output_length": 3, "hash_ids": [1]}`,
	`{"Timestamp": 1, "input_length": 2, "output_length": 3, "hash_ids": [1]}`,
	`{"timestamp": 1.5, "input_length": 2, "output_length": 3, "hash_ids": [1]}`,
	`{"timestamp": 1e3, "input_length": 2, "output_length": 3, "hash_ids": [01]}`,
	`{"timestamp": 1, "input_length": 2, "output_length": 3, "hash_ids": null}`,
	`{"timestamp": 1, "input_length": 2, "output_length": 3, "hash_ids": [-1]}`,
	`{"timestamp": 9223372036854775807, "input_length": -9223372036854775808, "output_length": 3, "hash_ids": [1,]}`,
	`{"timestamp": 1, "input_length": 2, "output_length": 3, "hash_ids": [1]}}`,
	`{"timestamp": 1, "input_length": 2, "output_length": 3, "hash_ids": [1 2]}`,
}

// Whatever the fast path accepts, encoding/json decodes to the same
// record; what it refuses goes to encoding/json, so the two never differ.
func FuzzParseTraceLine(f *testing.F) {
	for _, s := range traceLineSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var fast traceLine
		if !parseTraceLine(raw, &fast) {
			return
		}
		var want traceLine
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", raw, err)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("%q: fast %+v, encoding/json %+v", raw, fast, want)
		}
	})
}

// The real trace's shape takes the fast path.
func TestTraceLineFastPath(t *testing.T) {
	var rec traceLine
	if !parseTraceLine([]byte(traceLineSeeds[0]), &rec) || *rec.Timestamp != 27482 || *rec.InputLength != 6955 ||
		*rec.OutputLength != 52 || !reflect.DeepEqual(rec.HashIDs, []uint64{46, 47, 48, 49}) {
		t.Fatalf("got %+v", rec)
	}
	for _, s := range traceLineSeeds[3:] {
		if parseTraceLine([]byte(s), &traceLine{}) {
			t.Errorf("fast path took %s", s)
		}
	}
}
