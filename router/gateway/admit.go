package gateway

import (
	"context"
	"net/http"
	goruntime "runtime"

	"switchyard/router/config"
	"switchyard/router/metrics"
)

// codeOverloaded answers a request past gateway.max_in_flight.
const codeOverloaded = "overloaded"

// admit runs an inference route under gateway.max_in_flight: past it,
// the request is answered 503 with Retry-After before its body is read.
// 503, not 429: the limit is the router's capacity, not the client's
// quota, and a load balancer in front may send the retry to another
// router replica (SDKs retry either, honouring Retry-After).
func (g *Gateway) admit(anthropic bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := int64(g.st.Load().cfg.Gateway.MaxInFlight)
		if limit <= 0 {
			limit = config.DefaultMaxInFlight
		}
		if g.running.Add(1) > limit {
			g.running.Add(-1)
			p := &problem{status: http.StatusServiceUnavailable, code: codeOverloaded, refused: metrics.RefusedOverloaded,
				message: "the gateway is serving as many requests as it takes (gateway.max_in_flight); retry shortly"}
			w.Header().Set("Retry-After", retryAfterSeconds)
			if anthropic {
				writeAnthropicProblem(w, p)
			} else {
				p.write(w)
			}
			return
		}
		defer g.running.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// parseSlots bounds the request bodies parsed (and converted) at once to
// the cores there are: more in parallel would not finish sooner, and
// would leave none for everything else (/health included). Waiting for
// a slot is bounded by the client's patience and, in number, by
// gateway.max_in_flight.
func newParseSlots() chan struct{} {
	return make(chan struct{}, max(2, goruntime.GOMAXPROCS(0)))
}

// parsing takes a parse slot; false when the client left first. The
// caller runs parsed once done.
func (g *Gateway) parsing(ctx context.Context) bool {
	select {
	case g.parseSlots <- struct{}{}:
		return true // a free slot: the client's context is not even looked at
	default:
	}
	select {
	case g.parseSlots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// parsed gives back the slot parsing took.
func (g *Gateway) parsed() { <-g.parseSlots }
