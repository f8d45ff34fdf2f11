package sim

import (
	"testing"
	"time"

	"switchyard/internal/traces"
)

// BenchmarkMooncakeTrace simulates the whole Mooncake conversation trace
// (12,031 requests) on 16 aggregated engine-model workers under the
// load-based picker, recording nothing.
func BenchmarkMooncakeTrace(b *testing.B) {
	path := traces.Require(b, traces.Mooncake)
	sc, err := ParseScenario([]byte(`
seed: 1
fleet:
  - {role: aggregated, count: 16}
workload:
  trace: {path: "` + path + `"}
`))
	if err != nil {
		b.Fatal(err)
	}
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
		b.ReportMetric(float64(s.LoadMessages), "load-msgs")
	}
}
