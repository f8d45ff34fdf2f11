package epp_test

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"switchyard/router/epp"
)

// fuzzInput reads a gateway's messages from fuzz bytes; past the end every
// read is zero, so any input is a whole script.
type fuzzInput struct{ data []byte }

func (f *fuzzInput) more() bool { return len(f.data) > 0 }

func (f *fuzzInput) byte() byte {
	if len(f.data) == 0 {
		return 0
	}
	b := f.data[0]
	f.data = f.data[1:]
	return b
}

// bytes reads a length byte and up to that many bytes.
func (f *fuzzInput) bytes() []byte {
	n := min(int(f.byte()), len(f.data))
	b := f.data[:n]
	f.data = f.data[n:]
	return b
}

// pick reads one of the choices, or (past them) a string of the input's own.
func (f *fuzzInput) pick(choices ...string) string {
	i := int(f.byte())
	if i < len(choices) {
		return choices[i]
	}
	return string(f.bytes())
}

var (
	fuzzHeaderNames = []string{":path", ":status", ":method", epp.HeaderWorkerID, epp.DestinationHeader,
		"X-Dynamo-Routing-Mode", "content-type", "content-length"}
	fuzzPaths         = []string{"/v1/chat/completions", "/v1/completions", "/v1/chat/completions?x=1", "/v1/models", "/"}
	fuzzDestinations  = []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", ""}
	fuzzChat          = chatBody(testModel)
	fuzzCompletions   = `{"model":"m","prompt":"hello","max_tokens":1}`
	fuzzBodies        = []string{fuzzChat, fuzzChat[:len(fuzzChat)/2], fuzzChat[len(fuzzChat)/2:], fuzzCompletions, `{"model":"other"}`, ""}
	fuzzBodySendModes = []filterv3.ProcessingMode_BodySendMode{filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_STREAMED,
		filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_BUFFERED_PARTIAL, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED}
)

// settings reads the server's settings: the assumed body mode, a fixed
// model or the body's, a body cap the inputs can pass.
func (f *fuzzInput) settings() epp.Settings {
	b := f.byte()
	st := defaultSettings()
	st.Buffered = b&1 != 0
	if b&2 != 0 {
		st.ModelName = testModel
	}
	st.MaxBodyBytes = 64 + int(f.byte())*4
	return st
}

// message reads one ProcessingRequest: its kind, end_of_stream, headers or
// body chunk, and the optional protocol_config, subset hint and served
// endpoint.
func (f *fuzzInput) message() *extprocv3.ProcessingRequest {
	kind, flags := f.byte()%6, f.byte()
	eos := flags&1 != 0
	var r *extprocv3.ProcessingRequest
	switch kind {
	case 0, 3:
		var headers []*corev3.HeaderValue
		for range f.byte() % 5 {
			name := f.pick(fuzzHeaderNames...)
			var value string
			if name == ":status" {
				value = f.pick("200", "500", "429", "404")
			} else {
				value = f.pick(fuzzPaths...)
			}
			headers = append(headers, hv(name, value))
		}
		if kind == 0 {
			r = requestHeaders(eos, headers...)
		} else {
			r = responseHeaders(eos, headers...)
		}
	case 1:
		r = requestBody(f.pick(fuzzBodies...), eos)
	case 2:
		r = requestTrailers()
	case 4:
		r = responseBody(string(f.bytes()), eos)
	default:
		r = responseTrailers()
	}
	if flags&2 != 0 {
		r = withProtocol(r, fuzzBodySendModes[int(f.byte())%len(fuzzBodySendModes)], fuzzBodySendModes[int(f.byte())%len(fuzzBodySendModes)])
	}
	if flags&4 != 0 {
		var subset []string
		for range f.byte() % 4 {
			subset = append(subset, f.pick(fuzzDestinations...))
		}
		r = withSubset(r, flags&8 != 0, subset...)
	}
	if flags&16 != 0 {
		served := structpb.NewStringValue(f.pick(fuzzDestinations...))
		if r.MetadataContext == nil {
			r.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
		}
		r.MetadataContext.FilterMetadata[epp.LBNamespace] = &structpb.Struct{Fields: map[string]*structpb.Value{epp.ServedKey: served}}
	}
	return r
}

// overTheWire is the message as the server would receive it, false when
// gRPC would refuse it (a string that is not UTF-8).
func overTheWire(r *extprocv3.ProcessingRequest) (*extprocv3.ProcessingRequest, bool) {
	b, err := proto.Marshal(r)
	if err != nil {
		return nil, false
	}
	out := &extprocv3.ProcessingRequest{}
	return out, proto.Unmarshal(b, out) == nil
}

// maxFuzzMessages bounds one exchange's script.
const maxFuzzMessages = 64

// fuzzSeed writes a script: settings bytes, then each message's bytes.
func fuzzSeed(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// FuzzExchange feeds one exchange whatever sequence of ext_proc messages
// a gateway might send (any kind in any order, headers twice, headers that try to pin or
// steer, bodies cut anywhere or over the cap, body modes announced or
// not, subset hints as strings or lists, served-endpoint reports) on a
// real routing core over three workers, one without an address. Whatever
// arrives: no panic; no error but a refusal of the stream
// (InvalidArgument); every answer is one gRPC could send; at most one
// immediate response, and nothing after it; every request the core pinned
// is ended exactly once by the time the stream closes; and an answer that
// carries the destination as a header and as envoy.lb metadata carries
// the same one in both.
func FuzzExchange(f *testing.F) {
	headers := func(eos byte, path byte) []byte { return []byte{0, eos, 1, 0, path} }
	f.Add(fuzzSeed([]byte{0, 100}, headers(0, 0), []byte{1, 1, 0}, []byte{3, 0, 1, 1, 0}, []byte{4, 1, 3, 'a', 'b', 'c'}))
	f.Add(fuzzSeed([]byte{1, 100}, headers(2, 0), []byte{4, 0, 2, 0}, []byte{1, 0, 1}, []byte{1, 1, 2}, []byte{5, 0}))
	f.Add(fuzzSeed([]byte{2, 100}, headers(1, 3), []byte{3, 1, 0}))
	f.Add(fuzzSeed([]byte{0, 0}, headers(4, 0), []byte{3, 1, 0, 1, 1}, []byte{1, 1, 0}))
	f.Add(fuzzSeed([]byte{0, 100}, headers(12, 0), []byte{3, 0}, []byte{1, 0, 0}, []byte{2, 0}, []byte{3, 17, 1, 1, 0, 1}))
	f.Add(fuzzSeed([]byte{0, 100}, []byte{0, 0, 2, 3, 0, 1, 0, 0}, []byte{1, 1, 0}))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzInput{data: data}
		h := newHarness(t, in.settings(), testTransports...)
		var reqs []*extprocv3.ProcessingRequest
		for in.more() && len(reqs) < maxFuzzMessages {
			if r, ok := overTheWire(in.message()); ok {
				reqs = append(reqs, r)
			}
		}
		out, err := h.processErr(t, reqs...)
		if err != nil && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("Process: %v", err)
		}

		for i, r := range out {
			if r.GetImmediateResponse() != nil && i != len(out)-1 {
				t.Fatalf("answer %d of %d is an immediate response, and more followed", i+1, len(out))
			}
			dest, hasLB := lbDestination(r)
			header, hasHeader := setHeaders(commonOf(r).GetHeaderMutation())[epp.DestinationHeader]
			if hasLB && hasHeader && dest != header {
				t.Fatalf("destination header %q, envoy.lb metadata %q", header, dest)
			}
			if hasLB && (dest == "" || strings.HasPrefix(dest, ":")) {
				t.Fatalf("destination %q names no host", dest)
			}
		}
		if why := h.picks.balanced(); why != "" {
			t.Fatal(why)
		}
	})
}
