package epp_test

import (
	"context"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"switchyard/router/clock"
	"switchyard/router/epp"
	"switchyard/router/metrics"
)

// The exchange paths the end-to-end tests (router/server) do not take,
// each on a real routing core over two addressed workers.

var chatPath = hv(":path", "/v1/chat/completions")

// With no protocol_config from the gateway and the settings saying
// buffered, the headers get a bare answer (the gateway waits for it
// before it sends the body) and the destination goes with the body's
// answer, the body itself untouched.
func TestBufferedWhenTheSettingsSaySo(t *testing.T) {
	st := defaultSettings()
	st.Buffered = true
	h := newHarness(t, st, testTransports[:2]...)
	out := h.process(t, requestHeaders(false, chatPath), requestBody(chatBody(testModel), true))
	require.Len(t, out, 2)
	require.NotNil(t, out[0].GetRequestHeaders(), "the headers' answer first")
	_, hasDest := lbDestination(out[0])
	require.False(t, hasDest, "no destination before the body")
	require.NotNil(t, out[1].GetRequestBody())
	set, _, lb := routed(t, out)
	require.Equal(t, "10.0.0.1:8000", lb)
	require.Equal(t, lb, set[epp.DestinationHeader])
	require.Nil(t, commonOf(out[1]).GetBodyMutation(), "the buffered body passes unchanged")
	require.Empty(t, h.picks.balanced())
}

// A GET without a body is routed on its headers alone, for the model the
// settings name.
func TestBodylessRequestRoutesForTheConfiguredModel(t *testing.T) {
	st := defaultSettings()
	st.ModelName = testModel
	h := newHarness(t, st, testTransports[:2]...)
	out := h.process(t, requestHeaders(true, hv(":method", "GET"), hv(":path", "/v1/models")))
	require.Len(t, out, 1)
	require.NotNil(t, out[0].GetRequestHeaders())
	set, _, lb := routed(t, out)
	require.Equal(t, "10.0.0.1:8000", lb)
	require.Equal(t, "33", set[epp.HeaderWorkerID])

	// Without a configured model, nothing names one: 400.
	h = newHarness(t, defaultSettings(), testTransports[:2]...)
	out = h.process(t, requestHeaders(true, hv(":path", "/v1/models")))
	require.Len(t, out, 1)
	require.Equal(t, 400, int(out[0].GetImmediateResponse().GetStatus().GetCode()))
}

// Trailers end a body that never said end_of_stream: the request is
// routed then, and the trailers answered after the destination.
func TestRequestTrailersEndTheBody(t *testing.T) {
	h := newHarness(t, defaultSettings(), testTransports[:2]...)
	body := chatBody(testModel)
	out := h.process(t, requestHeaders(false, chatPath), requestBody(body[:10], false), requestBody(body[10:], false), requestTrailers())
	_, _, lb := routed(t, out)
	require.Equal(t, "10.0.0.1:8000", lb)
	require.NotNil(t, out[len(out)-1].GetRequestTrailers(), "the trailers answered last")
	var echoed []byte
	for _, r := range out {
		echoed = append(echoed, commonOf(r).GetBodyMutation().GetStreamedResponse().GetBody()...)
	}
	require.Equal(t, body, string(echoed), "the full-duplex body is sent on whole")
}

// A client's own x-dynamo-* pins and destination are removed: only the
// picker steers, and its own headers replace them.
func TestClientSteeringHeadersAreRemoved(t *testing.T) {
	h := newHarness(t, defaultSettings(), testTransports[:2]...)
	out := h.process(t, requestHeaders(false, chatPath, hv("X-Dynamo-Worker-Instance-Id", "34"),
		hv(epp.DestinationHeader, "192.0.2.1:8000"), hv("x-dynamo-routing-mode", "disaggregated"), hv("content-type", "application/json")),
		requestBody(chatBody(testModel), true))
	set, removed, lb := routed(t, out)
	require.ElementsMatch(t, []string{"x-dynamo-worker-instance-id", epp.DestinationHeader, "x-dynamo-routing-mode"}, removed)
	require.Equal(t, "10.0.0.1:8000", lb)
	require.Equal(t, "33", set[epp.HeaderWorkerID])
	require.Equal(t, "aggregated", set[epp.HeaderRoutingMode])
}

// Response headers with end_of_stream (a response without a body) end
// the request in the core before the stream closes.
func TestResponseHeadersEndTheRequest(t *testing.T) {
	var outcomes []epp.Outcome
	st := defaultSettings()
	h := newHarness(t, st, testTransports[:2]...)
	h.srv = epp.New(st, epp.Options{Picker: h.picks, Workers: h.picks.p.(epp.Workers), Clock: h.clk, Metrics: sharedMetrics,
		OnOutcome: func(o epp.Outcome) { outcomes = append(outcomes, o) }})
	out := h.process(t, withProtocol(requestHeaders(false, chatPath), filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED),
		requestBody(chatBody(testModel), true), responseHeaders(true, hv(":status", "204")))
	require.NotNil(t, out[len(out)-1].GetResponseHeaders())
	require.Empty(t, h.picks.balanced())
	require.Len(t, outcomes, 1)
	require.Equal(t, epp.OutcomeOK, outcomes[0].Status, "ended by the response headers, not cancelled by the stream's close")
}

// The subset hint as a list value: a destination inside it is routed, a
// hint excluding every worker gets 503 and releases the pick.
func TestSubsetHintAsAList(t *testing.T) {
	// Round robin's first pick is 10.0.0.1: outside this hint.
	h := newHarness(t, defaultSettings(), testTransports[:2]...)
	out := h.process(t, withSubset(requestHeaders(false, chatPath), false, "192.0.2.7:8000", "10.0.0.2:8000"), requestBody(chatBody(testModel), true))
	require.Len(t, out, 1)
	require.Equal(t, 503, int(out[0].GetImmediateResponse().GetStatus().GetCode()))
	require.Empty(t, h.picks.balanced(), "the refused pick is released")

	h = newHarness(t, defaultSettings(), testTransports[:2]...)
	out = h.process(t, withSubset(requestHeaders(false, chatPath), false, "192.0.2.7:8000", "10.0.0.1:8000"), requestBody(chatBody(testModel), true))
	_, _, lb := routed(t, out)
	require.Equal(t, "10.0.0.1:8000", lb)
}

var _ extprocv3.ExternalProcessor_ProcessServer = (*memStream)(nil)

// Request headers twice on one stream would route a second request and
// leave the first one's dispatch open in the core for good: the stream is
// refused, and the one request routed is ended when it closes.
func TestRequestHeadersTwiceRefuseTheStream(t *testing.T) {
	st := defaultSettings()
	st.ModelName = testModel
	h := newHarness(t, st, testTransports[:2]...)
	bodyless := requestHeaders(true, hv(":path", "/v1/models"))
	out, err := h.processErr(t, bodyless, bodyless)
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Len(t, out, 1, "one request routed")
	require.Empty(t, h.picks.balanced())
}

// Request headers after the body was routed (trailers first) are refused
// the same way, the routed request ended.
func TestRequestHeadersAfterTheBodyRefuseTheStream(t *testing.T) {
	st := defaultSettings()
	st.ModelName = testModel
	h := newHarness(t, st, testTransports[:2]...)
	out, err := h.processErr(t, requestTrailers(), requestHeaders(true, chatPath))
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	_, _, lb := routed(t, out)
	require.Equal(t, "10.0.0.1:8000", lb)
	require.Empty(t, h.picks.balanced())
}

// A refused second request counts as a protocol error.
func TestRefusedStreamIsCounted(t *testing.T) {
	st := defaultSettings()
	st.ModelName = testModel
	h := newHarness(t, st, testTransports[:2]...)
	counter := sharedMetrics.Decisions.WithLabelValues(metrics.EPPProtocol)
	before := testutil.ToFloat64(counter)
	bodyless := requestHeaders(true, hv(":path", "/v1/models"))
	_, err := h.processErr(t, bodyless, bodyless)
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Equal(t, before+1, testutil.ToFloat64(counter))
}

// A gateway that skips the request headers sends the body first; the
// request is timed from it, not from the zero time.
func TestBodyFirstIsTimedFromTheBody(t *testing.T) {
	st := defaultSettings()
	st.ModelName = testModel
	clk := clock.NewManual(t0)
	shared := fleetShared(t, clk, testTransports[:2]...)
	var got []epp.Outcome
	srv := epp.New(st, epp.Options{Picker: shared, Workers: shared, Clock: clk, Metrics: sharedMetrics,
		OnOutcome: func(o epp.Outcome) { got = append(got, o) }})
	s := &memStream{ctx: context.Background(), in: []*extprocv3.ProcessingRequest{
		requestBody(chatBody(testModel), true), responseHeaders(true, hv(":status", "200"))}}
	require.NoError(t, srv.Process(s))
	require.Len(t, got, 1)
	require.Equal(t, "ok", got[0].Status)
	require.Less(t, got[0].E2E, time.Second, "timed from the body")
}
