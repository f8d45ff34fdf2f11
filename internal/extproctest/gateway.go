// Package extproctest is a small stand-in for a Gateway API inference
// gateway (Envoy with its ext_proc filter), for tests and benchmarks of
// the endpoint picker: Envoy cannot be installed where the tests run.
//
// It speaks the client side of ext_proc v3 as Envoy does for an inference
// pool: the request headers, then the body (FULL_DUPLEX_STREAMED chunks or
// one BUFFERED message), applies the picker's header and body mutations,
// forwards the request to the endpoint the picker named (checking that the
// header and the envoy.lb metadata agree), and streams the response back
// through the picker (headers with the served endpoint in the metadata
// context, then the body chunks) to the client.
package extproctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	destinationHeader = "x-gateway-destination-endpoint"
	lbNamespace       = "envoy.lb"
	servedKey         = "x-gateway-destination-endpoint-served"
)

// Gateway forwards client requests where the endpoint picker says.
type Gateway struct {
	Picker extprocv3.ExternalProcessorClient
	// Buffered sends the request body as one message (BUFFERED) instead
	// of FULL_DUPLEX_STREAMED chunks of ChunkSize (default 64 KiB).
	Buffered  bool
	ChunkSize int
	// Announce sends the body modes in the first message, as newer Envoy
	// releases do.
	Announce bool
	// Subset, when set, restricts the endpoints (the subset hint).
	Subset []string
	// Upstream sends the forwarded requests (default http.DefaultClient).
	Upstream *http.Client
}

// ServeHTTP routes one request through the picker.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := g.serve(w, r); err != nil {
		http.Error(w, "gateway stand-in: "+err.Error(), http.StatusBadGateway)
	}
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	// Like the proxy, the stand-in finishes relaying an upstream answer
	// (and telling the picker it ended) even when the client stops reading
	// at the last event of a stream.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	stream, err := g.Picker.Process(ctx)
	if err != nil {
		return err
	}
	defer stream.CloseSend()
	req, err := g.requestPhase(stream, r, body)
	if err != nil {
		return err
	}
	if req.immediate != nil {
		for _, h := range req.immediate.GetHeaders().GetSetHeaders() {
			w.Header().Set(h.GetHeader().GetKey(), value(h.GetHeader()))
		}
		w.WriteHeader(int(req.immediate.GetStatus().GetCode()))
		_, _ = w.Write(req.immediate.GetBody())
		return nil
	}
	return g.responsePhase(stream, w, r, req)
}

// routed is what the request phase decided.
type routed struct {
	immediate   *extprocv3.ImmediateResponse
	destination string
	header      http.Header
	body        []byte
}

func (g *Gateway) requestPhase(stream extprocv3.ExternalProcessor_ProcessClient, r *http.Request, body []byte) (*routed, error) {
	first := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(r), EndOfStream: len(body) == 0}}}
	if g.Announce {
		mode := filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
		if g.Buffered {
			mode = filterv3.ProcessingMode_BUFFERED
		}
		first.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: mode, ResponseBodyMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED}
	}
	if g.Subset != nil {
		first.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{
				"x-gateway-destination-endpoint-subset": structpb.NewStringValue(strings.Join(g.Subset, ","))}}}}
	}
	if err := stream.Send(first); err != nil {
		return nil, err
	}
	out := &routed{header: r.Header.Clone(), body: body}
	if len(body) == 0 {
		return out, g.receiveHeaders(stream, out)
	}
	if g.Buffered {
		if err := g.receiveHeaders(stream, out); err != nil || out.immediate != nil {
			return out, err
		}
		if err := stream.Send(bodyMessage(body, true)); err != nil {
			return nil, err
		}
		return out, g.receiveBufferedBody(stream, out)
	}
	chunk := g.ChunkSize
	if chunk <= 0 {
		chunk = 64 << 10
	}
	for rest := body; len(rest) > 0; {
		n := min(chunk, len(rest))
		if err := stream.Send(bodyMessage(rest[:n], n == len(rest))); err != nil {
			return nil, err
		}
		rest = rest[n:]
	}
	if err := g.receiveHeaders(stream, out); err != nil || out.immediate != nil {
		return out, err
	}
	return out, g.receiveStreamedBody(stream, out)
}

func bodyMessage(b []byte, end bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: end}}}
}

// receiveHeaders reads the answer to the request headers.
func (g *Gateway) receiveHeaders(stream extprocv3.ExternalProcessor_ProcessClient, out *routed) error {
	return receiveCommon(stream, out, "request headers", func(m *extprocv3.ProcessingResponse) *extprocv3.CommonResponse {
		if h := m.GetRequestHeaders(); h != nil {
			return orEmpty(h.GetResponse())
		}
		return nil
	})
}

// receiveBufferedBody reads the answer to a BUFFERED body, which may
// replace it.
func (g *Gateway) receiveBufferedBody(stream extprocv3.ExternalProcessor_ProcessClient, out *routed) error {
	return receiveCommon(stream, out, "request body", func(m *extprocv3.ProcessingResponse) *extprocv3.CommonResponse {
		if b := m.GetRequestBody(); b != nil {
			return orEmpty(b.GetResponse())
		}
		return nil
	})
}

func orEmpty(c *extprocv3.CommonResponse) *extprocv3.CommonResponse {
	if c == nil {
		return &extprocv3.CommonResponse{}
	}
	return c
}

// receiveCommon reads one answer of the expected kind (common picks its
// CommonResponse, nil for another kind) or an immediate response, and
// applies its header and body mutations and destination.
func receiveCommon(stream extprocv3.ExternalProcessor_ProcessClient, out *routed, what string,
	common func(*extprocv3.ProcessingResponse) *extprocv3.CommonResponse) error {
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	if im := m.GetImmediateResponse(); im != nil {
		out.immediate = im
		return nil
	}
	c := common(m)
	if c == nil {
		return fmt.Errorf("expected the %s' answer, got %T", what, m.GetResponse())
	}
	apply(out.header, c.GetHeaderMutation())
	if nb := c.GetBodyMutation().GetBody(); nb != nil {
		out.body = nb
	}
	return out.takeDestination(m.GetDynamicMetadata())
}

func (g *Gateway) receiveStreamedBody(stream extprocv3.ExternalProcessor_ProcessClient, out *routed) error {
	var body []byte
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		sr := m.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if sr == nil {
			return fmt.Errorf("expected a streamed request body chunk, got %T", m.GetResponse())
		}
		body = append(body, sr.GetBody()...)
		if sr.GetEndOfStream() {
			out.body = body
			return nil
		}
	}
}

// takeDestination reads the envoy.lb metadata, which must agree with the
// header (the protocol's rule).
func (out *routed) takeDestination(md *structpb.Struct) error {
	if md == nil {
		return nil // the body's answer carries it
	}
	meta := md.GetFields()[lbNamespace].GetStructValue().GetFields()[destinationHeader].GetStringValue()
	if hdr := out.header.Get(destinationHeader); meta != hdr {
		return fmt.Errorf("destination header %q and envoy.lb metadata %q disagree", hdr, meta)
	}
	out.destination = meta
	return nil
}

func (g *Gateway) responsePhase(stream extprocv3.ExternalProcessor_ProcessClient, w http.ResponseWriter, r *http.Request, req *routed) error {
	if req.destination == "" {
		return errors.New("the picker named no destination")
	}
	dest := strings.Split(req.destination, ",")[0]
	up, err := http.NewRequestWithContext(stream.Context(), r.Method, "http://"+dest+r.URL.RequestURI(), bytes.NewReader(req.body))
	if err != nil {
		return err
	}
	up.Header = req.header
	up.Header.Del(destinationHeader)
	up.ContentLength = int64(len(req.body))
	client := g.Upstream
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(up)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte(strconv.Itoa(resp.StatusCode))}}}
	for k, vs := range resp.Header {
		for _, v := range vs {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)})
		}
	}
	served := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{lbNamespace: {Fields: map[string]*structpb.Value{
		servedKey: structpb.NewStringValue(dest)}}}}
	if err := stream.Send(&extprocv3.ProcessingRequest{MetadataContext: served, Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm}}}); err != nil {
		return err
	}
	if _, err := stream.Recv(); err != nil {
		return err
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		end := rerr != nil
		if n > 0 || end {
			if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: append([]byte(nil), buf[:n]...), EndOfStream: end}}}); err != nil {
				return nil // the client side is already answered in part
			}
			m, err := stream.Recv()
			if err != nil {
				return nil
			}
			if sr := m.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse(); sr != nil {
				_, _ = w.Write(sr.GetBody())
			} else {
				_, _ = w.Write(buf[:n])
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if end {
			return nil
		}
	}
}

func headerMap(r *http.Request) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte(r.Method)},
		{Key: ":path", RawValue: []byte(r.URL.RequestURI())},
		{Key: ":authority", RawValue: []byte(r.Host)},
	}}
	for k, vs := range r.Header {
		for _, v := range vs {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)})
		}
	}
	return hm
}

func value(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// apply performs a header mutation on h.
func apply(h http.Header, m *extprocv3.HeaderMutation) {
	for _, name := range m.GetRemoveHeaders() {
		h.Del(name)
	}
	for _, o := range m.GetSetHeaders() {
		if strings.EqualFold(o.GetHeader().GetKey(), "content-length") {
			continue // the forwarded request sets its own
		}
		h.Set(o.GetHeader().GetKey(), value(o.GetHeader()))
	}
}

// Held is a request the picker routed whose ext_proc stream is still
// open: the picker counts it in flight, as while a worker generates, until
// Close ends the stream (the picker then ends it as cancelled).
type Held struct {
	// Header is the request's headers after the picker's mutations (its
	// x-dynamo-* pins among them).
	Header http.Header
	// Destination is the endpoint the picker named; Immediate is its
	// answer instead when it routed nowhere.
	Destination string
	Immediate   *extprocv3.ImmediateResponse
	cancel      context.CancelFunc
}

// Close ends the stream.
func (h *Held) Close() { h.cancel() }

// Route sends one request's headers and body as the gateway does and
// reads the picker's decision, leaving the stream open.
func (g *Gateway) Route(ctx context.Context, r *http.Request, body []byte) (*Held, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := g.Picker.Process(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	out, err := g.requestPhase(stream, r, body)
	if err != nil {
		cancel()
		return nil, err
	}
	return &Held{Header: out.header, Destination: out.destination, Immediate: out.immediate, cancel: cancel}, nil
}
