package epp_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"switchyard/fakefleet/registrar"
	"switchyard/router/clock"
	"switchyard/router/core"
	"switchyard/router/epp"
	"switchyard/router/events"
	"switchyard/router/metrics"
	"switchyard/router/picker"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The workers of the test fleet: two with an address, one whose Endpoint
// record names no usable host.
var testTransports = []string{"10.0.0.1:9000/x", "10.0.0.2:9000/x", "no-port/x"}

const (
	testModel      = "m"
	testTargetPort = 8000
)

// fleetShared is a real routing core (round robin, so picks are
// predictable) that has discovered one aggregated worker of model "m" per
// transport, instance ids 0x21 onward.
func fleetShared(tb testing.TB, clk clock.Clock, transports ...string) *core.Shared {
	tb.Helper()
	return fleetSharedWith(tb, clk, picker.NameRoundRobin, transports...)
}

// fleetSharedWith is fleetShared with the named picker.
func fleetSharedWith(tb testing.TB, clk clock.Clock, name string, transports ...string) *core.Shared {
	tb.Helper()
	c, err := core.New(core.Options{Picker: name})
	if err != nil {
		tb.Fatal(err)
	}
	var batch []events.Event
	for i, tr := range transports {
		w := registrar.Worker{Namespace: "ns", Component: "backend", WorkerType: "aggregated", Model: testModel, BlockSize: 16,
			TotalKVBlocks: 1000, MaxNumBatchedTokens: 4096, MaxNumSeqs: 64, ContextLength: 8192, Transport: tr}
		recs := registrar.Records(w, uint64(0x21+i))
		for _, k := range slices.Sorted(maps.Keys(recs)) {
			ks := events.Models
			if strings.HasPrefix(k, "v1/instances/") {
				ks = events.Instances
			}
			batch = append(batch, events.DiscoveryPut{At: t0, Namespace: "ns",
				DiscoveryRecord: events.DiscoveryRecord{Keyspace: ks, Key: k, Value: recs[k]}})
		}
	}
	c.Discovery(batch)
	if n := len(c.Snapshot().Workers); n != len(transports) {
		tb.Fatalf("discovered %d workers, want %d", n, len(transports))
	}
	return core.NewShared(c, clk)
}

// countingPicker passes picks to the core and counts, per request id, the
// picks it granted and the Ended or Finished calls that released them.
type countingPicker struct {
	p            epp.Picker
	mu           sync.Mutex
	picked       map[uint64]int
	ended        map[uint64]int
	refusedPicks int
}

func newCountingPicker(p epp.Picker) *countingPicker {
	return &countingPicker{p: p, picked: map[uint64]int{}, ended: map[uint64]int{}}
}

func (c *countingPicker) Pick(req picker.Request) (picker.Selection, bool) {
	sel, ok := c.p.Pick(req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		c.picked[req.ID]++
	} else {
		c.refusedPicks++
	}
	return sel, ok
}

func (c *countingPicker) PickRanked(req picker.Request, dst []picker.Candidate) (picker.Selection, []picker.Candidate, bool) {
	sel, dst, ok := c.p.(epp.RankingPicker).PickRanked(req, dst)
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		c.picked[req.ID]++
	} else {
		c.refusedPicks++
	}
	return sel, dst, ok
}

func (c *countingPicker) Ended(req picker.Request, sel picker.Selection) {
	c.p.Ended(req, sel)
	c.release(req.ID)
}

func (c *countingPicker) Finished(req picker.Request, sel picker.Selection) {
	c.p.Finished(req, sel)
	c.release(req.ID)
}

// FirstToken passes the first token on when the core hears of it.
func (c *countingPicker) FirstToken(id uint64) {
	if ft, ok := c.p.(epp.FirstTokener); ok {
		ft.FirstToken(id)
	}
}

func (c *countingPicker) release(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended[id]++
}

// balanced says why some granted pick was not ended exactly once, "" when
// every one was.
func (c *countingPicker) balanced() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, n := range c.picked {
		if n != 1 || c.ended[id] != 1 {
			return fmt.Sprintf("request %d: picked %d times, ended %d times", id, n, c.ended[id])
		}
	}
	for id, n := range c.ended {
		if c.picked[id] == 0 {
			return fmt.Sprintf("request %d: ended %d times, never picked", id, n)
		}
	}
	return ""
}

// memStream is an in-memory ext_proc stream: the requests a gateway would
// send, queued ahead, and the answers collected. It lets the exchange run
// thousands of times a second under the fuzzer; the end-to-end tests in
// router/server drive it over a real gRPC stream. Each answer is
// marshalled as gRPC would, so one it could not send fails the test.
type memStream struct {
	grpc.ServerStream // not called by the exchange; nil
	ctx               context.Context
	in                []*extprocv3.ProcessingRequest
	out               []*extprocv3.ProcessingResponse
	sendErr           error
}

func (m *memStream) Context() context.Context { return m.ctx }

func (m *memStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if len(m.in) == 0 {
		return nil, io.EOF
	}
	r := m.in[0]
	m.in = m.in[1:]
	return r, nil
}

func (m *memStream) Send(r *extprocv3.ProcessingResponse) error {
	if _, err := proto.Marshal(r); err != nil && m.sendErr == nil {
		m.sendErr = err
	}
	m.out = append(m.out, r)
	return nil
}

// harness is an endpoint-picker server over a test fleet.
type harness struct {
	picks *countingPicker
	srv   *epp.Server
	clk   *clock.Manual
}

var sharedMetrics = metrics.New().EPP

func newHarness(tb testing.TB, st epp.Settings, transports ...string) *harness {
	tb.Helper()
	clk := clock.NewManual(t0)
	shared := fleetShared(tb, clk, transports...)
	h := &harness{picks: newCountingPicker(shared), clk: clk}
	h.srv = epp.New(st, epp.Options{Picker: h.picks, Workers: shared, Clock: clk, Metrics: sharedMetrics})
	return h
}

// process runs one exchange over reqs and returns the answers; the
// exchange must end without an error.
func (h *harness) process(tb testing.TB, reqs ...*extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
	tb.Helper()
	out, err := h.processErr(tb, reqs...)
	if err != nil {
		tb.Fatalf("Process: %v", err)
	}
	return out
}

// processErr runs one exchange over reqs and returns the answers and how
// Process ended.
func (h *harness) processErr(tb testing.TB, reqs ...*extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, error) {
	tb.Helper()
	s := &memStream{ctx: context.Background(), in: reqs}
	err := h.srv.Process(s)
	if s.sendErr != nil {
		tb.Fatalf("an answer gRPC could not send: %v", s.sendErr)
	}
	return s.out, err
}

func defaultSettings() epp.Settings {
	return epp.Settings{Namespaces: []string{"ns"}, TargetPort: testTargetPort, MaxBodyBytes: 4096}
}

// Builders of what a gateway sends.

func hv(name, value string) *corev3.HeaderValue {
	return &corev3.HeaderValue{Key: name, RawValue: []byte(value)}
}

func requestHeaders(eos bool, headers ...*corev3.HeaderValue) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: headers}, EndOfStream: eos}}}
}

func requestBody(chunk string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: []byte(chunk), EndOfStream: eos}}}
}

func requestTrailers() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
}

func responseHeaders(eos bool, headers ...*corev3.HeaderValue) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: headers}, EndOfStream: eos}}}
}

func responseBody(chunk string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
		Body: []byte(chunk), EndOfStream: eos}}}
}

func responseTrailers() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}}
}

// withServed attaches the endpoint the gateway reports it served from.
func withServed(r *extprocv3.ProcessingRequest, endpoint string) *extprocv3.ProcessingRequest {
	r.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		epp.LBNamespace: {Fields: map[string]*structpb.Value{epp.ServedKey: structpb.NewStringValue(endpoint)}}}}
	return r
}

// withSubset attaches the gateway's subset hint (a list value, or one
// comma-separated string when asString).
func withSubset(r *extprocv3.ProcessingRequest, asString bool, endpoints ...string) *extprocv3.ProcessingRequest {
	var v *structpb.Value
	if asString {
		v = structpb.NewStringValue(strings.Join(endpoints, ","))
	} else {
		list := &structpb.ListValue{}
		for _, e := range endpoints {
			list.Values = append(list.Values, structpb.NewStringValue(e))
		}
		v = structpb.NewListValue(list)
	}
	r.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		epp.SubsetHintNamespace: {Fields: map[string]*structpb.Value{epp.SubsetHintKey: v}}}}
	return r
}

func withProtocol(r *extprocv3.ProcessingRequest, request, response filterv3.ProcessingMode_BodySendMode) *extprocv3.ProcessingRequest {
	r.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: request, ResponseBodyMode: response}
	return r
}

func chatBody(model string) string {
	return fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":"hello there"}]}`, model)
}

// Readers of the answers.

// setHeaders are the headers a mutation sets, values decoded.
func setHeaders(m *extprocv3.HeaderMutation) map[string]string {
	out := map[string]string{}
	for _, o := range m.GetSetHeaders() {
		out[o.GetHeader().GetKey()] = o.GetHeader().GetValue() + string(o.GetHeader().GetRawValue())
	}
	return out
}

// commonOf is the common response of a headers or body answer.
func commonOf(r *extprocv3.ProcessingResponse) *extprocv3.CommonResponse {
	switch a := r.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return a.RequestHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_RequestBody:
		return a.RequestBody.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return a.ResponseHeaders.GetResponse()
	case *extprocv3.ProcessingResponse_ResponseBody:
		return a.ResponseBody.GetResponse()
	}
	return nil
}

// lbDestination is the destination in an answer's envoy.lb metadata.
func lbDestination(r *extprocv3.ProcessingResponse) (string, bool) {
	v, ok := r.GetDynamicMetadata().GetFields()[epp.LBNamespace].GetStructValue().GetFields()[epp.DestinationHeader]
	return v.GetStringValue(), ok
}

// routed finds the answer carrying the destination: its set headers, the
// headers it removes, and its metadata destination.
func routed(tb testing.TB, out []*extprocv3.ProcessingResponse) (set map[string]string, removed []string, lb string) {
	tb.Helper()
	for _, r := range out {
		if dest, ok := lbDestination(r); ok {
			m := commonOf(r).GetHeaderMutation()
			return setHeaders(m), m.GetRemoveHeaders(), dest
		}
	}
	tb.Fatalf("no answer carries a destination: %v", out)
	return nil, nil, ""
}
