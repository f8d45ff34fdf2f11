package recorder

import (
	"fmt"
	"os"
	"testing"
	"time"

	"switchyard/fakefleet/wire"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/events"
	"switchyard/router/picker"
)

// fileBytes is the size of a recording with its WAL.
func fileBytes(b *testing.B, path string) int64 {
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// BenchmarkWriter writes what one simulated request produces: the request,
// a selection over 16 candidates, ten kv_metrics messages and the outcome
// (13 records). "sim" carries 1,024 prompt token ids with each request;
// "live" none. The time includes draining the queue at Close.
func BenchmarkWriter(b *testing.B) {
	for _, tokens := range []int{0, 1024} {
		name := "live"
		if tokens > 0 {
			name = fmt.Sprintf("sim_%d_tokens", tokens)
		}
		b.Run(name, func(b *testing.B) { benchWriter(b, tokens) })
	}
}

func benchWriter(b *testing.B, ntokens int) {
	const perRequest = 13
	dir := b.TempDir()
	empty := dir + "/empty.db"
	w, err := Create(empty, simRun(base), Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		b.Fatal(err)
	}
	baseline := fileBytes(b, empty)

	loads := make([][][]byte, 10)
	for i := range loads {
		loads[i] = wire.LoadMessage(uint64(1000+i), uint64(i), wire.ActiveLoad{WorkerID: uint64(1000 + i), DPRank: uint32(i % 2),
			ActiveDecodeBlocks: wire.U64(uint64(40 * i)), ActivePrefillTokens: wire.U64(uint64(512 * i)), KVUsedBlocks: wire.U64(uint64(900 + i))}, base)
	}
	cands := make([]picker.Candidate, 16)
	for i := range cands {
		cands[i] = picker.Candidate{Phase: "decode", WorkerID: uint64(1000 + i/2), DPRank: uint32(i % 2), Cost: 0.25 * float64(i), Defined: true}
	}
	for i := range 4 {
		cands[i].Phase = "prefill"
	}
	var tokens []uint32
	if ntokens > 0 {
		tokens = make([]uint32, ntokens)
		for i := range tokens {
			tokens[i] = uint32(i * 7919 % 151000)
		}
	}
	ns := []string{"dynamo"}

	path := dir + "/bench.db"
	w, err = Create(path, simRun(base), Options{Block: true})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		now := base.Add(time.Duration(i) * time.Millisecond)
		id := uint64(i)
		w.Request(Request{At: now, RequestID: id, Model: "qwen", Namespaces: ns, PromptTokens: 4096, MaxTokens: 256,
			Generation: 3, Tokens: tokens, Session: id / 4, Route: "sim"})
		w.Selection(Selection{At: now, RequestID: id, OK: true, Sel: picker.Selection{Namespace: "dynamo",
			Decode:  picker.Pin{WorkerID: 1003, DPRank: 1, DPDeclared: true, Role: discovery.RoleDecode},
			Prefill: picker.Pin{WorkerID: 1000, Role: discovery.RolePrefill}, HasPrefill: true,
			DecodeReason: picker.ReasonLoad, PrefillReason: picker.ReasonLoad}, Candidates: cands})
		for j, f := range loads {
			w.LoadMessage(&events.LoadMessage{At: now, Namespace: "dynamo", PublisherID: uint64(1000 + j), Frames: f}, envelope.Applied)
		}
		w.Outcome(Outcome{At: now.Add(time.Second), RequestID: id, Status: StatusOK, PromptTokens: 4096, CachedTokens: 1024,
			OutputTokens: 256, TTFT: 80 * time.Millisecond, E2E: time.Second, ITL: 3 * time.Millisecond})
	}
	st, err := w.Close()
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	for tbl, n := range st.Dropped {
		if n != 0 {
			b.Fatalf("%s dropped %d", tbl, n)
		}
	}
	b.ReportMetric(float64(perRequest*b.N)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(fileBytes(b, path)-baseline)/float64(b.N), "bytes/request")
}
