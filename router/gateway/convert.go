package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"time"

	"switchyard/router/config"
)

// converter adapts an ingress that does not speak OpenAI chat completions
// (Anthropic Messages, OpenAI Responses) to the chat path: it supplies
// the upstream path and body of each send, and answers the client in its
// own dialect. One converter serves one request.
type converter interface {
	// outbound is the path and body of one send to b; a problem when this
	// request cannot be put to b (the client's error, answered as is).
	outbound(b *backend) (path string, body []byte, p *problem)
	// converts reports whether b's answers are converted, rather than
	// relayed as they came (a native Responses passthrough).
	converts(b *backend) bool
	// writeError answers with the ingress's error shape; code is one of
	// the gateway's codes or an upstream's.
	writeError(w http.ResponseWriter, status int, code, msg string)
	// buffered converts a 2xx chat completion into the client's answer.
	buffered(completion []byte) ([]byte, error)
	// stream converts a chat completion event stream.
	stream() streamSink
}

// fail answers the client with an error the gateway produced, in the
// client's dialect.
func (x *exchange) fail(status int, code, msg string) {
	if x.conv != nil {
		x.conv.writeError(x.w, status, code, msg)
		return
	}
	writeError(x.w, status, code, msg)
}

// writeAs answers with the problem in the exchange's dialect.
func (p *problem) writeAs(x *exchange) {
	p.noteOn(x.w)
	x.fail(p.status, p.code, p.message)
}

// deliver sends an upstream answer to the client: relayed as it came, or
// converted into the ingress's dialect. It settles the attempt and
// returns its result.
func (x *exchange) deliver(a *attempt, peek []byte) string {
	if x.conv == nil || !x.conv.converts(a.b) {
		return x.relay(a, peek)
	}
	return x.deliverConverted(a, peek)
}

// serveConverted runs a converted request through the chat path's
// routing, under gateway.request_timeout. in is the final body's
// inbound (the one the picker estimates); route is the ingress route,
// path the upstream one; conv sends and answers.
func (g *Gateway) serveConverted(w http.ResponseWriter, r *http.Request, st *state, key *apiKey, in *inbound, route, path string, conv converter) {
	deadline := time.Now().Add(orDefault(st.cfg.Gateway.RequestTimeout.Std(), config.DefaultRequestTimeout))
	x := &exchange{
		g: g, st: st, w: w, r: r, ctx: r.Context(), deadline: deadline, key: key, in: in, route: route, path: path, conv: conv,
		disclose: wantsDisclosure(r.Header), now: g.clock.Now(), note: noteOf(w),
	}
	x.serve()
}

// maxBodyFor is the configured request body limit.
func maxBodyFor(st *state) int64 {
	return orDefaultInt(st.cfg.Gateway.MaxBodyBytes, config.DefaultMaxBodyBytes)
}

// newID is a random identifier with the dialect's prefix ("msg_",
// "resp_"): chat completion ids are the backend's and say nothing to the
// client of another API.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
