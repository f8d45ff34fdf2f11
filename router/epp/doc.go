// Package epp is the Gateway API Inference Extension endpoint picker: an
// Envoy ext_proc server that answers, for each request a Gateway holds,
// which worker serves it.
//
// It routes on the routing core the shim gateway uses (the same Picker,
// the same prompt rendering for KV overlap), and answers as the GAIE
// endpoint-picker protocol v1 and Dynamo's endpoint picker do: the
// destination as the x-gateway-destination-endpoint header AND as envoy.lb
// dynamic metadata, Dynamo's worker pins as x-dynamo-* headers (the
// worker's frontend sidecar runs in direct routing mode and serves the
// pinned workers), nvext.token_data in the body when the prompt was
// tokenized, an immediate 503 when nothing is eligible. The response
// headers and the end of the response stream end the request's dispatch
// accounting in the core.
//
// Bodies arrive FULL_DUPLEX_STREAMED (Envoy's reference configuration for
// inference pools) or BUFFERED; the gateway announces its mode in its
// first message (protocol_config), else the configured mode is assumed.
// A stream carries one request: request headers that come twice, or after
// the body was routed, refuse the stream (InvalidArgument) rather than
// route a second request over the first one's open dispatch.
package epp
