package epp

import (
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"switchyard/router/picker"
)

func header(name, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: name, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// pinHeaders are the destination and Dynamo's worker pins: decimal ids,
// a rank whenever the card declares data_parallel_size.
func pinHeaders(dest string, sel *picker.Selection) []*corev3.HeaderValueOption {
	mode := "aggregated"
	if sel.HasPrefill && !sel.Bypass {
		mode = "disaggregated"
	}
	out := []*corev3.HeaderValueOption{
		header(DestinationHeader, dest),
		header(HeaderWorkerID, strconv.FormatUint(sel.Decode.WorkerID, 10)),
		header(HeaderRoutingMode, mode),
	}
	if sel.Decode.DPDeclared {
		out = append(out, header(HeaderDPRank, strconv.FormatUint(uint64(sel.Decode.DPRank), 10)))
	}
	if mode == "disaggregated" {
		out = append(out, header(HeaderPrefillID, strconv.FormatUint(sel.Prefill.WorkerID, 10)))
		if sel.Prefill.DPDeclared {
			out = append(out, header(HeaderPrefillDPRank, strconv.FormatUint(uint64(sel.Prefill.DPRank), 10)))
		}
	}
	return out
}

// destinationMetadata is {"envoy.lb": {"x-gateway-destination-endpoint": dest}}.
func destinationMetadata(dest string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		LBNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationHeader: structpb.NewStringValue(dest),
		}}),
	}}
}

func withMetadata(r *extprocv3.ProcessingResponse, meta *structpb.Struct) *extprocv3.ProcessingResponse {
	r.DynamicMetadata = meta
	return r
}

func headersResponse(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: c}}}
}

// bodyResponse answers a request body message.
func bodyResponse(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: c}}}
}

// responseBodyResponse answers a response body message.
func responseBodyResponse(c *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: c}}}
}

// streamedBody is one FULL_DUPLEX_STREAMED body chunk sent on.
func streamedBody(chunk []byte, end bool) *extprocv3.CommonResponse {
	return &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
		StreamedResponse: &extprocv3.StreamedBodyResponse{Body: chunk, EndOfStream: end}}}}
}

func immediate(code int, body []byte) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{header("content-type", "application/json")}},
		Body:    body,
		Details: "switchyard endpoint picker",
	}}}
}

// subsetHint reads the endpoints the proxy allows, nil when it sets none.
func subsetHint(md *corev3.Metadata) []string {
	ns := md.GetFilterMetadata()[SubsetHintNamespace]
	v, ok := ns.GetFields()[SubsetHintKey]
	if !ok {
		return nil
	}
	var out []string
	add := func(s string) {
		for _, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part != "" && len(out) < maxSubsetEndpoints {
				out = append(out, part)
			}
		}
	}
	switch {
	case v.GetListValue() != nil:
		for _, e := range v.GetListValue().GetValues() {
			add(e.GetStringValue())
		}
	default:
		add(v.GetStringValue())
	}
	if out == nil {
		out = []string{} // present but empty: nothing is allowed
	}
	return out
}

// servedEndpoint reads the endpoint the proxy reports it served from.
func servedEndpoint(md *corev3.Metadata) string {
	ns := md.GetFilterMetadata()[LBNamespace]
	return ns.GetFields()[ServedKey].GetStringValue()
}
