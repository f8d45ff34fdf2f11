package gateway

import (
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	upstreamhttp "switchyard/router/gateway/upstream"
	"switchyard/router/metrics"
	"switchyard/router/picker"
)

// Pin headers of Dynamo's direct routing mode. Ids are decimal: the
// frontend treats any other spelling as absent.
const (
	hdrWorkerID      = "X-Dynamo-Worker-Instance-Id"
	hdrPrefillID     = "X-Dynamo-Prefill-Instance-Id"
	hdrDPRank        = "X-Dynamo-Dp-Rank"
	hdrPrefillDPRank = "X-Dynamo-Prefill-Dp-Rank"
)

// Disclosure: a client that sends X-Backend (even blank) learns which
// backend and workers served it; nobody else does.
const (
	hdrXBackend          = "X-Backend"
	hdrDiscloseBackend   = "X-Switchyard-Backend"
	hdrDiscloseWorkerID  = "X-Switchyard-Worker-Instance-Id"
	hdrDisclosePrefillID = "X-Switchyard-Prefill-Instance-Id"
	// hdrDiscloseRoutingPath says "unified" when conditional
	// disaggregation let the decode worker prefill the request itself.
	hdrDiscloseRoutingPath = "X-Switchyard-Routing-Path"
	ownHeaderPrefix        = "x-switchyard-"
	dynamoHeaderPrefix     = "x-dynamo-"
)

// pinAliases are the older spellings the Dynamo frontend still honours as
// worker pins (dynamo-wire §8.1). They do not start with x-dynamo-, so they
// are listed, or a client could pin workers through them.
var pinAliases = map[string]bool{
	"X-Worker-Instance-Id":  true,
	"X-Prefill-Instance-Id": true,
	"X-Dp-Rank":             true,
	"X-Data-Parallel-Rank":  true,
	"X-Prefill-Dp-Rank":     true,
}

// isDynamoHeader reports whether a header name can steer Dynamo's routing.
// Names are compared without regard to case: the server canonicalizes
// only well-formed names, and HTTP names are case-insensitive anyway.
func isDynamoHeader(name string) bool {
	// Every such name starts with "x-": most names a request carries are
	// refused on their first two bytes.
	if len(name) < 2 || name[0]|0x20 != 'x' || name[1] != '-' {
		return false
	}
	if hasPrefixFold(name, dynamoHeaderPrefix) {
		return true
	}
	return pinAliases[textproto.CanonicalMIMEHeaderKey(name)]
}

// stripDynamo deletes every Dynamo routing header from h.
func stripDynamo(h http.Header) {
	for k := range h {
		if isDynamoHeader(k) {
			delete(h, k)
		}
	}
}

// StripDynamoHeaders is the global middleware: no client-supplied Dynamo
// routing header gets past it, whatever route the request takes. The
// ingress and the dispatcher strip again, so a route mounted without this
// middleware is still safe.
func StripDynamoHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stripDynamo(r.Header)
		next.ServeHTTP(w, r)
	})
}

// hopByHop are per-connection headers a proxy must not forward.
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// notForwarded are client headers that stay at the gateway: the client's
// credential for the router, cookies, framing the transport recomputes,
// compression (the gateway relays bytes as they come) and the disclosure
// request.
var notForwarded = []string{"Authorization", "Cookie", "Host", "Content-Length", "Accept-Encoding", "Expect", hdrXBackend}

// outboundHeaders builds an upstream request's headers from the client's.
// Client x-switchyard-* headers stay at the gateway too: the prefix is the
// router's own, and an upstream that trusts it (another Switchyard, a
// proxy) must only ever see it from a router. Only the headers forwarded
// are copied (their value slices capped, so an append never writes into
// the client's).
func outboundHeaders(client http.Header) http.Header {
	h := make(http.Header, len(client)+maxPins) // room for the pins, so setting them does not grow the map
	eachForwarded(client, func(k string, v []string) { h[k] = v[:len(v):len(v)] })
	return h
}

// eachForwarded calls add with each client header an upstream request
// carries: the rule outboundHeaders and writeHead share.
func eachForwarded(client http.Header, add func(name string, values []string)) {
	named := connectionNamed(client)
	for k, v := range client {
		if forwarded(k) && (named == nil || !named[textproto.CanonicalMIMEHeaderKey(k)]) {
			add(k, v)
		}
	}
}

// forwarded reports whether a client header may reach an upstream, the
// Connection header's own list aside.
func forwarded(k string) bool {
	return !slices.Contains(hopByHop, k) && !slices.Contains(notForwarded, k) &&
		!hasPrefixFold(k, ownHeaderPrefix) && !isDynamoHeader(k)
}

// connectionNamed is the set of headers the Connection header names
// (canonical), nil when it names none.
func connectionNamed(h http.Header) map[string]bool {
	var named map[string]bool
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				if named == nil {
					named = map[string]bool{}
				}
				named[textproto.CanonicalMIMEHeaderKey(name)] = true
			}
		}
	}
	return named
}

// eachPin names the picker's choice: decimal instance ids, and a rank
// whenever the card declares data_parallel_size (rank 0 included). A
// conditional-disaggregation bypass pins the decode worker alone.
func eachPin(sel *picker.Selection, pin func(name string, v uint64)) {
	pin(hdrWorkerID, sel.Decode.WorkerID)
	if sel.Decode.DPDeclared {
		pin(hdrDPRank, uint64(sel.Decode.DPRank))
	}
	if sel.HasPrefill && !sel.Bypass {
		pin(hdrPrefillID, sel.Prefill.WorkerID)
		if sel.Prefill.DPDeclared {
			pin(hdrPrefillDPRank, uint64(sel.Prefill.DPRank))
		}
	}
}

// setPins writes the picker's choice into h.
func setPins(h http.Header, sel *picker.Selection) {
	// The numbers share one string and the values one array: two
	// allocations for up to four pins.
	var names [maxPins]string
	var ends [maxPins]int
	var digits [maxPins * 20]byte
	buf, n := digits[:0], 0
	eachPin(sel, func(name string, v uint64) {
		buf = strconv.AppendUint(buf, v, 10)
		names[n], ends[n] = name, len(buf)
		n++
	})
	all := string(buf)
	values := make([]string, n)
	for i, start := 0, 0; i < n; i++ {
		values[i] = all[start:ends[i]]
		h[names[i]] = values[i : i+1 : i+1]
		start = ends[i]
	}
}

// maxPins is the most pin headers setPins sets.
const maxPins = 4

// writeHead renders the upstream request to b straight into h, with what
// outboundHeaders, setPins and send's own values would put in a map: the
// client's forwarded headers, the pins (when sel is set) and the body's
// type. It is the builtin client's path (b.sendKey set).
func (x *exchange) writeHead(h *upstreamhttp.Head, b *backend, path string, sel *picker.Selection) {
	if q := x.r.URL.RawQuery; q != "" {
		h.Start(http.MethodPost, b.baseURL.Host, b.sendPath, path, "?", q)
	} else {
		h.Start(http.MethodPost, b.baseURL.Host, b.sendPath, path)
	}
	eachForwarded(x.r.Header, func(k string, values []string) {
		if k == "Content-Type" || x.in.stream && k == "Accept" { // replaced below
			return
		}
		for _, v := range values {
			h.Add(k, v)
		}
	})
	if sel != nil {
		eachPin(sel, h.AddUint)
	}
	h.Add("Content-Type", jsonContentType[0])
	if x.in.stream {
		h.Add("Accept", eventStreamAccept[0])
	}
}

// copyResponseHeaders relays an upstream response's headers, minus
// hop-by-hop ones, any Dynamo header (never echoed to clients) and any
// x-switchyard-* header (only the gateway may disclose). The value slices
// are the response's own, capped so an append never writes into them.
func copyResponseHeaders(dst, src http.Header) {
	named := connectionNamed(src)
	for k, v := range src {
		if slices.Contains(hopByHop, k) || named != nil && named[textproto.CanonicalMIMEHeaderKey(k)] ||
			isDynamoHeader(k) || hasPrefixFold(k, ownHeaderPrefix) {
			continue
		}
		dst[k] = v[:len(v):len(v)]
	}
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// wantsDisclosure reports whether the client sent X-Backend, blank or not.
func wantsDisclosure(h http.Header) bool {
	_, ok := h[hdrXBackend]
	return ok
}

// disclose sets the disclosure headers for the backend (and workers) now
// serving the request, replacing any from an earlier attempt.
func disclose(h http.Header, backend string, sel *picker.Selection) {
	h.Del(hdrDiscloseWorkerID)
	h.Del(hdrDisclosePrefillID)
	h.Del(hdrDiscloseRoutingPath)
	h.Set(hdrDiscloseBackend, backend)
	if sel == nil {
		return
	}
	h.Set(hdrDiscloseWorkerID, strconv.FormatUint(sel.Decode.WorkerID, 10))
	switch {
	case sel.Bypass:
		h.Set(hdrDiscloseRoutingPath, metrics.PathUnified)
	case sel.HasPrefill:
		h.Set(hdrDisclosePrefillID, strconv.FormatUint(sel.Prefill.WorkerID, 10))
	}
}
