package sim

import (
	"testing"
	"time"

	"switchyard/internal/traces"
)

// BenchmarkMooncakeTrace simulates the whole Mooncake conversation trace
// (12,031 requests) on 16 aggregated engine-model workers under the
// load-based picker, recording nothing: once on the mocker's timing and
// once on the Llama-3.1-8B/H100 profile, whose context_length is raised
// to the model's 128 Ki tokens because the trace's longest conversations
// exceed the profile's 8,192, at the profile's 16-token blocks and at the
// mocker scenarios' 64 (four times fewer blocks to cache, hash and
// evict). x-realtime is simulated time over wall time.
func BenchmarkMooncakeTrace(b *testing.B) {
	path := traces.Require(b, traces.Mooncake)
	const h100 = "engine: {profile: ../profiles/llama-3.1-8b-h100-tp1.json}}"
	for _, c := range []struct{ name, group string }{
		{"mocker", "{role: aggregated, count: 16}"},
		{"llama-3.1-8b-h100-tp1", "{role: aggregated, count: 16, context_length: 131072, " + h100},
		{"llama-3.1-8b-h100-tp1-block64", "{role: aggregated, count: 16, context_length: 131072, block_size: 64, " + h100},
	} {
		b.Run(c.name, func(b *testing.B) {
			sc, err := ParseScenario([]byte(`
seed: 1
fleet:
  - ` + c.group + `
workload:
  trace: {path: "` + path + `"}
`))
			if err != nil {
				b.Fatal(err)
			}
			benchmarkRun(b, sc)
		})
	}
}

func benchmarkRun(b *testing.B, sc *Scenario) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		r, err := New(sc, Options{})
		if err != nil {
			b.Fatal(err)
		}
		s, err := r.Execute()
		if err != nil {
			b.Fatal(err)
		}
		if s.Served != 12031 {
			b.Fatalf("served %d of %d (%+v)", s.Served, s.Requests, s)
		}
		wall := time.Since(start)
		b.ReportMetric(float64(s.Requests)/wall.Seconds(), "req/s")
		b.ReportMetric(float64(s.Virtual)/float64(wall), "x-realtime")
		b.ReportMetric(s.Virtual.Seconds(), "sim-s")
		b.ReportMetric(float64(s.LoadMessages), "load-msgs")
	}
}
