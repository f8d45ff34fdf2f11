package groundtruth

import (
	"bytes"
	"testing"
)

// FuzzParseExperiment: any bytes give an experiment or ErrInvalid, never a
// panic, and an accepted experiment keeps its limits.
func FuzzParseExperiment(f *testing.F) {
	f.Add([]byte(sharedPrefixJSON))
	f.Add([]byte(`{"schema":"switchyard-groundtruth/v1","id":"x","workload":{"kind":"request_trace"}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		exp, err := ParseExperiment(data)
		if err != nil {
			return
		}
		if exp.Engine.TP < 1 || exp.Engine.BlockSize < 1 || exp.Engine.BlockSize > maxBlockSize {
			t.Fatalf("accepted engine %+v", exp.Engine)
		}
		if sp := exp.Workload.SharedPrefix; exp.Workload.Simulatable && exp.Workload.Kind == SharedPrefix &&
			(sp == nil || sp.Prompts() > maxPrompts || len(exp.Workload.Stages) > maxStages) {
			t.Fatalf("accepted workload %+v", exp.Workload)
		}
	})
}

// FuzzParseRequests: any bytes give requests within the ceilings or
// ErrInvalid, never a panic.
func FuzzParseRequests(f *testing.F) {
	f.Add([]byte(traceLines), 16)
	f.Add([]byte(`{"id":"a","arrival_s":0,"input_tokens":1,"output_tokens":1}`), 1)
	f.Fuzz(func(t *testing.T, data []byte, blockSize int) {
		reqs, err := ParseRequests(bytes.NewReader(data), blockSize)
		if err != nil {
			return
		}
		for _, r := range reqs {
			if r.InputTokens < 1 || r.InputTokens > maxInputTokens || len(r.PrefixBlockIDs)*blockSize > r.InputTokens {
				t.Fatalf("accepted %+v with block size %d", r, blockSize)
			}
		}
	})
}
