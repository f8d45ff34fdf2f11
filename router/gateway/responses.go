package gateway

import (
	"net/http"
	"time"

	"switchyard/router/config"
)

// pathResponses is the OpenAI Responses API. /v1/responses/compact is
// not routed: it falls to the /v1/ catch-all's 404 (see docs/gateway.md).
const pathResponses = "/v1/responses"

// responses is the Responses ingress. It routes like the chat ingress
// (pinned when a shim pool serves the model, with new pins for every
// send); the body each send carries depends on the backend chosen: the
// client's own for a native Responses backend (responses_api native, or
// unset: an OpenAI-wire backend such as a Dynamo frontend), a converted
// chat completion for one with responses_api: converted.
func (g *Gateway) responses() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stripDynamo(r.Header)
		st := g.st.Load()
		key, ok := st.authenticate(r)
		if !ok {
			writeUnauthorized(w)
			return
		}
		body, held, p := g.readBody(w, r, st)
		defer g.bodies.give(held)
		if p != nil {
			p.write(w)
			return
		}
		if !g.parsing(r.Context()) {
			return // the client left
		}
		in, conv, p := g.parseResponses(body)
		g.parsed()
		if p != nil {
			p.write(w)
			return
		}
		g.serveConverted(w, r, st, key, in, pathResponses, pathResponses, conv)
	})
}

// parseResponses reads a Responses body: model and stream validated,
// client nvext pins and token_data stripped from the passthrough body,
// and its chat conversion when there is one.
func (g *Gateway) parseResponses(body []byte) (*inbound, *responsesConverter, *problem) {
	in, p := parseInbound(body, kindChat, g.est)
	if p != nil {
		return nil, nil, p
	}
	conv := &responsesConverter{native: in.body, model: in.model, created: g.clock.Now()}
	if chat, err := responsesToChat(in.body); err != nil {
		// Only a send to a converting backend needs the conversion; a
		// native one takes the request as it is.
		conv.problem = problemOf(err)
	} else if cin, p := parseInbound(chat, kindChat, g.est); p == nil {
		conv.chat = cin.body
		in.promptTokens, in.maxTokens = cin.promptTokens, cin.maxTokens
	} else {
		conv.problem = p
	}
	return in, conv, nil
}

// responsesConverter answers one Responses request.
type responsesConverter struct {
	native  []byte   // the client's body, for native backends
	chat    []byte   // its chat conversion, for converting backends
	problem *problem // why there is no conversion
	model   string
	created time.Time
}

// converted reports whether b takes Responses requests as chat
// completions.
func converted(b *backend) bool { return b.cfg.ResponsesAPI == config.ResponsesConverted }

func (c *responsesConverter) outbound(b *backend) (string, []byte, *problem) {
	if !converted(b) {
		return pathResponses, c.native, nil
	}
	if c.problem != nil {
		return "", nil, c.problem
	}
	return pathChat, c.chat, nil
}

func (c *responsesConverter) converts(b *backend) bool { return converted(b) }

// Responses errors have OpenAI's shape, the gateway's own.
func (c *responsesConverter) writeError(w http.ResponseWriter, status int, code, msg string) {
	writeError(w, status, code, msg)
}

func (c *responsesConverter) buffered(completion []byte) ([]byte, error) {
	return responseOf(completion, c.model, c.created)
}

func (c *responsesConverter) stream() streamSink { return newResponsesStream(c.model, c.created) }
