package epp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"switchyard/fakefleet/registrar"
	"switchyard/fakefleet/wire"
	"switchyard/fixtures"
	"switchyard/router/clock"
	"switchyard/router/core"
	"switchyard/router/discovery"
	"switchyard/router/epp"
	"switchyard/router/events"
	"switchyard/router/metrics"
	"switchyard/router/picker"
	"switchyard/router/prompt"
)

// benchWorkers is the synthetic fleet's size: aggregated workers fed to
// the core as discovery records and load messages, no processes behind.
const benchWorkers = 16

// benchCore is a KV-aware routing core over benchWorkers aggregated
// workers, each with a fresh load sample that stays fresh for the run.
func benchCore(b *testing.B) *core.Shared {
	b.Helper()
	c, err := core.New(core.Options{Picker: picker.NameKV, KV: picker.DefaultKVOptions(), MaxStaleness: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	var batch []events.Event
	for i := range benchWorkers {
		id := uint64(0x100 + i)
		w := registrar.Worker{Namespace: "dynamo", Component: "backend", WorkerType: "aggregated", Model: "m", BlockSize: 16,
			TotalKVBlocks: 16384, MaxNumBatchedTokens: 8192, MaxNumSeqs: 256, ContextLength: 131072,
			Transport: fmt.Sprintf("10.0.0.%d:9000/generate", i+1),
			Channels:  []registrar.Channel{{Topic: discovery.TopicLoad, PublisherID: id * 10, Endpoint: "tcp://127.0.0.1:9"}}}
		batch = append(batch, recordPuts(w, id, now)...)
	}
	c.Discovery(batch)
	for i := range benchWorkers {
		id := uint64(0x100 + i)
		c.LoadMessage(&events.LoadMessage{At: now, Namespace: "dynamo", PublisherID: id * 10,
			Frames: wire.LoadMessage(id*10, 1, wire.ActiveLoad{WorkerID: id, KVUsedBlocks: wire.U64(uint64(100 * i))}, now)})
	}
	if n := len(c.Snapshot().Workers); n != benchWorkers {
		b.Fatalf("%d workers discovered, want %d", n, benchWorkers)
	}
	return core.NewShared(c, clock.Real{})
}

// recordPuts are a worker's Endpoint and Model records as discovery puts.
func recordPuts(w registrar.Worker, id uint64, at time.Time) []events.Event {
	recs := registrar.Records(w, id)
	keys := make([]string, 0, len(recs))
	for k := range recs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]events.Event, 0, len(keys))
	for _, k := range keys {
		ks := events.EventChannels
		switch {
		case strings.HasPrefix(k, "v1/instances/"):
			ks = events.Instances
		case strings.HasPrefix(k, "v1/mdc/"):
			ks = events.Models
		}
		out = append(out, events.DiscoveryPut{At: at, Namespace: "dynamo", DiscoveryRecord: events.DiscoveryRecord{Keyspace: ks, Key: k, Value: recs[k]}})
	}
	return out
}

// testPrompter renders and tokenizes chats with the project's test
// tokenizer and its chat template.
func testPrompter(b *testing.B) *prompt.Service {
	b.Helper()
	tok, err := fixtures.TokenizerFile(fixtures.TestTokenizer, fixtures.TokenizerJSON)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := fixtures.TokenizerFile(fixtures.TestTokenizer, fixtures.TokenizerConfig)
	if err != nil {
		b.Fatal(err)
	}
	p, err := prompt.FromFiles(tok, cfg)
	if err != nil {
		b.Fatal(err)
	}
	// Long permit waits: the concurrent benchmark measures throughput, not
	// how renders are shed when the cores are busy.
	svc := prompt.New(prompt.Static{P: p}, prompt.Limits{PermitWait: time.Minute, Deadline: time.Minute}, prompt.Hooks{})
	b.Cleanup(svc.Close)
	return svc
}

// chatBody is a chat completions body of about size bytes: a system
// prompt and alternating turns of prose.
func benchChatBody(b *testing.B, size int) []byte {
	b.Helper()
	prose := "The endpoint picker reads the whole body before it answers, renders the conversation with the " +
		"model's chat template, tokenizes it and asks which worker holds the longest prefix of its blocks. "
	msgs := []map[string]string{{"role": "system", "content": "You are a careful assistant."}}
	for turn := 0; ; turn++ {
		role := "user"
		if turn%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": fmt.Sprintf("Turn %d. %s", turn, strings.Repeat(prose, 4))})
		body, err := json.Marshal(map[string]any{"model": "m", "max_tokens": 64, "messages": msgs})
		if err != nil {
			b.Fatal(err)
		}
		if len(body) >= size {
			return body
		}
	}
}

// serve runs an ext_proc server on a loopback port and returns a client
// connected to it over plaintext gRPC.
func serve(b *testing.B, srv extprocv3.ExternalProcessorServer) extprocv3.ExternalProcessorClient {
	b.Helper()
	var g *grpc.Server
	if s, ok := srv.(*epp.Server); ok {
		var stop func()
		g, _, stop = epp.NewGRPC(s, epp.GRPCOptions{})
		b.Cleanup(stop)
	} else {
		g = grpc.NewServer(grpc.MaxRecvMsgSize(8 << 20))
		extprocv3.RegisterExternalProcessorServer(g, srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	b.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
}

// pickerServer is the endpoint picker on a fresh synthetic fleet; render
// tokenizes chat prompts for the KV-aware pick.
func pickerServer(b *testing.B, render bool) *epp.Server {
	b.Helper()
	shared := benchCore(b)
	o := epp.Options{Picker: shared, Workers: shared, Clock: clock.Real{}, Metrics: metrics.New().EPP}
	if render {
		o.Prompter = testPrompter(b)
	}
	return epp.New(epp.Settings{Namespaces: []string{"dynamo"}, TargetPort: 8000, MaxBodyBytes: 8 << 20,
		Render: render, SendTokenData: render}, o)
}

// echoServer is the transport baseline: an ext_proc server that makes no
// decision. It answers the headers as soon as the body's last chunk has
// arrived and echoes the chunks back, the same messages the endpoint
// picker exchanges, without reading the body.
type echoServer struct {
	extprocv3.UnimplementedExternalProcessorServer
}

func (echoServer) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	var chunks [][]byte
	for {
		m, err := stream.Recv()
		if err != nil {
			return nil
		}
		var out *extprocv3.ProcessingResponse
		switch r := m.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestBody:
			chunks = append(chunks, r.RequestBody.GetBody())
			if !r.RequestBody.GetEndOfStream() {
				continue
			}
			err = stream.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{ClearRouteCache: true}}}})
			for i, c := range chunks {
				if err != nil {
					break
				}
				err = stream.Send(streamedChunk(c, i == len(chunks)-1))
			}
			if err != nil {
				return err
			}
			continue
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			out = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
		default:
			continue
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

func streamedChunk(b []byte, end bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{
		Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: end}}}}}}}
}

// chunkSize is what Envoy's ext_proc filter streams a body in.
const chunkSize = 64 << 10

// exchange plays one request through an ext_proc server as a gateway in
// FULL_DUPLEX_STREAMED mode does: the headers, the body in 64 KiB chunks,
// then the (ended) response headers once the decision and the body came
// back. It returns the time from opening the stream (its first message)
// to receiving the answer to the request headers, and the body as the
// server sent it on.
func exchange(client extprocv3.ExternalProcessorClient, body []byte) (time.Duration, []byte, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	stream, err := client.Process(ctx)
	if err != nil {
		return 0, nil, err
	}
	first := &extprocv3.ProcessingRequest{
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED},
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":method", RawValue: []byte("POST")},
			{Key: ":path", RawValue: []byte("/v1/chat/completions")},
			{Key: ":authority", RawValue: []byte("gateway")},
			{Key: "content-type", RawValue: []byte("application/json")},
		}}}},
	}
	if err := stream.Send(first); err != nil {
		return 0, nil, err
	}
	for rest := body; len(rest) > 0; {
		n := min(chunkSize, len(rest))
		if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: rest[:n], EndOfStream: n == len(rest)}}}); err != nil {
			return 0, nil, err
		}
		rest = rest[n:]
	}
	m, err := stream.Recv()
	if err != nil {
		return 0, nil, err
	}
	took := time.Since(start)
	if m.GetRequestHeaders() == nil {
		return 0, nil, fmt.Errorf("expected the request headers' answer, got %v", m)
	}
	forwarded, err := drainBody(stream)
	if err != nil {
		return 0, nil, err
	}
	return took, forwarded, endResponse(stream)
}

// drainBody reads the streamed request body back to its last chunk.
func drainBody(stream extprocv3.ExternalProcessor_ProcessClient) ([]byte, error) {
	var body []byte
	for {
		m, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		sr := m.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return nil, fmt.Errorf("expected a streamed body chunk, got %v", m)
		}
		body = append(body, sr.GetBody()...)
		if sr.GetEndOfStream() {
			return body, nil
		}
	}
}

// endResponse reports a complete bodiless 200, which ends the request's
// dispatch accounting in the core, and closes the stream.
func endResponse(stream extprocv3.ExternalProcessor_ProcessClient) error {
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")}}}, EndOfStream: true}}}); err != nil {
		return err
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("the stream did not end cleanly: %v", err)
	}
	return nil
}

// decisionCases are the servers compared in one run: the transport
// baseline, the endpoint picker without rendering, and with the prompt
// rendered and tokenized for the KV-aware pick.
var decisionCases = []struct {
	name string
	make func(b *testing.B) extprocv3.ExternalProcessorServer
	// tokenized: the forwarded body carries nvext.token_data.
	tokenized bool
}{
	{"echo", func(*testing.B) extprocv3.ExternalProcessorServer { return echoServer{} }, false},
	{"epp", func(b *testing.B) extprocv3.ExternalProcessorServer { return pickerServer(b, false) }, false},
	{"epp-kv", func(b *testing.B) extprocv3.ExternalProcessorServer { return pickerServer(b, true) }, true},
}

// checkForwarded fails the benchmark unless the server did the work its
// case measures: the prompt tokenized exactly when rendering is on.
func checkForwarded(b *testing.B, client extprocv3.ExternalProcessorClient, body []byte, tokenized bool) {
	b.Helper()
	_, forwarded, err := exchange(client, body)
	if err != nil {
		b.Fatal(err)
	}
	if got := bytes.Contains(forwarded, []byte(`"token_data":[`)); got != tokenized {
		b.Fatalf("token_data in the forwarded body: %v, want %v", got, tokenized)
	}
}

// BenchmarkDecisionLatency is the time a gateway waits for the endpoint
// picker's destination: 4 KiB and 220 KiB chats streamed FULL_DUPLEX in
// 64 KiB chunks over a loopback gRPC connection, one request at a time,
// from the stream's first message to the request headers' answer. It
// reports that time's p50 and p99.
func BenchmarkDecisionLatency(b *testing.B) {
	for _, size := range []int{4 << 10, 220 << 10} {
		body := benchChatBody(b, size)
		for _, c := range decisionCases {
			b.Run(fmt.Sprintf("%s/%dKiB", c.name, size>>10), func(b *testing.B) {
				client := serve(b, c.make(b))
				checkForwarded(b, client, body, c.tokenized)
				took := make([]time.Duration, 0, b.N)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					d, _, err := exchange(client, body)
					if err != nil {
						b.Fatal(err)
					}
					took = append(took, d)
				}
				b.StopTimer()
				reportPercentiles(b, took)
			})
		}
	}
}

func reportPercentiles(b *testing.B, took []time.Duration) {
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
}

// concurrentStreams is the number of requests in flight at once in
// BenchmarkPicksPerCore.
const concurrentStreams = 64

// BenchmarkPicksPerCore is the endpoint picker's throughput with
// concurrentStreams requests in flight, each a small chat through a whole
// exchange (headers, one body chunk, decision, body back, response
// headers). It reports picks per second of CPU the process used
// (picks/cpu-s: per core actually spent, which holds on a machine shared
// with other work) and per second of wall time per GOMAXPROCS core
// (picks/s/core). Client and server share the process, so both count the
// gateway side's work as well: the picker alone does better.
func BenchmarkPicksPerCore(b *testing.B) {
	body := benchChatBody(b, 512)
	for _, c := range decisionCases {
		b.Run(c.name, func(b *testing.B) {
			client := serve(b, c.make(b))
			checkForwarded(b, client, body, c.tokenized)
			procs := runtime.GOMAXPROCS(0)
			b.SetParallelism(max(concurrentStreams/procs, 1))
			var failed atomic.Pointer[error]
			b.ReportAllocs()
			b.ResetTimer()
			start, cpuStart := time.Now(), cpuTime(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, _, err := exchange(client, body); err != nil {
						failed.CompareAndSwap(nil, &err)
						return
					}
				}
			})
			elapsed, cpu := time.Since(start), cpuTime(b)-cpuStart
			b.StopTimer()
			if err := failed.Load(); err != nil {
				b.Fatal(*err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds()/float64(procs), "picks/s/core")
			b.ReportMetric(float64(b.N)/cpu.Seconds(), "picks/cpu-s")
		})
	}
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
