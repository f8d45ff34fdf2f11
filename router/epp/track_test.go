package epp_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"switchyard/router/active"
	"switchyard/router/clock"
	"switchyard/router/epp"
	"switchyard/router/picker"
)

// watchedStream is a memStream that calls seen with the number of
// messages the exchange has handled, each time it asks for the next.
type watchedStream struct {
	*memStream
	handed int
	seen   func(handled int)
}

func (w *watchedStream) Recv() (*extprocv3.ProcessingRequest, error) {
	w.seen(w.handed)
	w.handed++
	return w.memStream.Recv()
}

// The endpoint picker reports a routed request's first token to the core:
// the first response body chunk when the gateway sends response bodies,
// the response headers when it does not. From then on the worker holds
// the prompt's blocks but no prompt tokens left to prefill; at the end,
// nothing.
func TestFirstTokenClearsThePrefillTokens(t *testing.T) {
	for _, tc := range []struct {
		name     string
		response filterv3.ProcessingMode_BodySendMode
		// cleared is the number of handled messages from which the prompt
		// is no longer to prefill: after the first body chunk, or after
		// the response headers.
		cleared int
	}{
		{"streamed response body", filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, 4},
		{"no response body", filterv3.ProcessingMode_NONE, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewManual(t0)
			shared := fleetSharedWith(t, clk, picker.NameLoadTracked, testTransports[0])
			srv := epp.New(defaultSettings(), epp.Options{Picker: shared, Workers: shared, Clock: clk, Metrics: sharedMetrics})
			rank := active.Rank{Namespace: "ns", WorkerID: 0x21}
			in := []*extprocv3.ProcessingRequest{
				withProtocol(requestHeaders(false, hv(":path", "/v1/chat/completions"), hv(":method", "POST")),
					filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, tc.response),
				requestBody(chatBody(testModel), true),
				responseHeaders(false, hv(":status", "200")),
			}
			if tc.response != filterv3.ProcessingMode_NONE {
				in = append(in, responseBody(`data: {"choices":[{"delta":{"content":"hi"}}]}`, false), responseBody("", true))
			} else {
				in = append(in, responseTrailers())
			}
			var loads []active.Load
			s := &watchedStream{memStream: &memStream{ctx: t.Context(), in: in}, seen: func(int) {
				loads = append(loads, shared.ActiveLoad(rank))
			}}
			if err := srv.Process(s); err != nil {
				t.Fatal(err)
			}
			loads = append(loads, shared.ActiveLoad(rank))
			// loads[i] is the worker's load after i messages.
			for i, l := range loads {
				switch {
				case i < 2:
					if l != (active.Load{}) {
						t.Fatalf("after %d messages, before the pick: %+v", i, l)
					}
				case i < tc.cleared:
					if l.Requests != 1 || l.PrefillTokens == 0 || l.Blocks == 0 {
						t.Fatalf("after %d messages, before the first token: %+v", i, l)
					}
				case i < len(in):
					if l.Requests != 1 || l.PrefillTokens != 0 || l.Blocks == 0 {
						t.Fatalf("after %d messages, after the first token: %+v", i, l)
					}
				default:
					if l != (active.Load{}) {
						t.Fatalf("after the response ended the worker holds %+v", l)
					}
				}
			}
		})
	}
}

// sseAnswer is a streamed chat answer of n tokens, one per event, with a
// closing event and a usage event; every event is fmt-formatted alike.
func sseAnswer(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"},\"finish_reason\":null}]}\n\n", i)
	}
	fmt.Fprintf(&b, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
	fmt.Fprintf(&b, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", n)
	return b.String()
}

// With output blocks predicted, the endpoint picker counts a streamed
// answer's events as its body chunks pass, events split across chunks at
// any byte, and the worker's predicted output blocks decay at each block
// boundary while the answer goes on; at its end the worker holds nothing.
// An answer that is not an event stream reports no progress.
func TestStreamedOutputDecaysThePrediction(t *testing.T) {
	for _, tc := range []struct {
		name        string
		contentType string
		chunk       int
		// want: the distinct output-block predictions seen, in order.
		want []uint64
	}{
		// 64 tokens asked for (4 blocks of 16); 40 streamed.
		{"event stream, 7-byte chunks", "text/event-stream; charset=utf-8", 7, []uint64{4, 3, 2, 0}},
		{"event stream, 1-byte chunks", "text/event-stream", 1, []uint64{4, 3, 2, 0}},
		{"event stream, one chunk", "text/event-stream", 1 << 20, []uint64{4, 2, 0}},
		{"not an event stream", "application/json", 7, []uint64{4, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewManual(t0)
			shared := fleetSharedWith(t, clk, picker.NameLoad, testTransports[0])
			st := shared.Settings()
			st.KV.Track = picker.Tracking{ActiveBlocks: true, PrefillTokens: true, OutputBlocks: true}
			if err := shared.Configure(t0, st); err != nil {
				t.Fatal(err)
			}
			if !shared.TracksOutput() {
				t.Fatal("the core does not predict output blocks")
			}
			srv := epp.New(defaultSettings(), epp.Options{Picker: shared, Workers: shared, Clock: clk, Metrics: sharedMetrics})
			rank := active.Rank{Namespace: "ns", WorkerID: 0x21}
			in := []*extprocv3.ProcessingRequest{
				withProtocol(requestHeaders(false, hv(":path", "/v1/chat/completions"), hv(":method", "POST")),
					filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED),
				requestBody(fmt.Sprintf(`{"model":%q,"max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, testModel), true),
				responseHeaders(false, hv(":status", "200"), hv("content-type", tc.contentType)),
			}
			for rest := sseAnswer(40); len(rest) > 0; {
				n := min(tc.chunk, len(rest))
				in = append(in, responseBody(rest[:n], false))
				rest = rest[n:]
			}
			in = append(in, responseBody("", true))
			var seen []uint64
			note := func() {
				l := shared.ActiveLoad(rank)
				if l.Requests == 0 && len(seen) == 0 {
					return // before the pick
				}
				if len(seen) == 0 || seen[len(seen)-1] != l.OutputBlocks {
					seen = append(seen, l.OutputBlocks)
				}
			}
			s := &watchedStream{memStream: &memStream{ctx: t.Context(), in: in}, seen: func(int) { note() }}
			if err := srv.Process(s); err != nil {
				t.Fatal(err)
			}
			note()
			if !slices.Equal(seen, tc.want) {
				t.Fatalf("predicted output blocks went %v, want %v", seen, tc.want)
			}
			if l := shared.ActiveLoad(rank); l != (active.Load{}) {
				t.Fatalf("after the answer the worker holds %+v", l)
			}
		})
	}
}
