package epp_test

import (
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
