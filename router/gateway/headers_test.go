package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/picker"
)

// randomCase flips the case of each letter of s at random.
func randomCase(t *rapid.T, s, label string) string {
	flips := rapid.SliceOfN(rapid.Bool(), len(s), len(s)).Draw(t, label)
	b := []byte(s)
	for i, up := range flips {
		if up {
			b[i] = strings.ToUpper(string(b[i]))[0]
		}
	}
	return string(b)
}

// dynamoName draws a Dynamo routing header name in random case: the pin
// headers themselves, their aliases, or any other x-dynamo-* name.
func dynamoName(t *rapid.T, label string) string {
	known := []string{
		"x-dynamo-worker-instance-id", "x-dynamo-prefill-instance-id", "x-dynamo-dp-rank", "x-dynamo-prefill-dp-rank",
		"x-dynamo-routing-mode", "x-dynamo-request-priority", "x-worker-instance-id", "x-prefill-instance-id",
		"x-dp-rank", "x-data-parallel-rank", "x-prefill-dp-rank",
	}
	name := rapid.OneOf(
		rapid.SampledFrom(known),
		rapid.StringMatching(`x-dynamo-[a-z0-9][a-z0-9-]{0,15}`),
	).Draw(t, label)
	return randomCase(t, name, label+"-case")
}

var headerValue = rapid.StringMatching(`[ -~]{0,24}`)

// Whatever Dynamo headers a client sends, in whatever case, the shim sees
// exactly the picker's pins, and whatever Dynamo headers the shim answers
// with, the client sees none. Ordinary headers pass both ways.
func TestHeaderStrippingProperty(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	var mu sync.Mutex
	var answerHeaders http.Header
	shim.setRespond(func(w http.ResponseWriter, r *http.Request, body []byte) {
		mu.Lock()
		for k, v := range answerHeaders {
			w.Header()[k] = v // raw keys: random case reaches the wire as drawn
		}
		mu.Unlock()
		answer(w, r, body, "ok")
	})
	f := newFixture(t, dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel)), []*discovery.Worker{
		withDP(worker("dynamo", prefillID, discovery.RolePrefill, clientModel), 0),
		withDP(worker("dynamo", decodeID, discovery.RoleDecode, clientModel), 1),
		worker("dynamo", decodeID+2, discovery.RoleDecode, clientModel),
	})

	rapid.Check(t, func(t *rapid.T) {
		sent := http.Header{}
		for i, n := 0, rapid.IntRange(0, 8).Draw(t, "n-dynamo"); i < n; i++ {
			sent[dynamoName(t, "client-dynamo")] = []string{headerValue.Draw(t, "v")}
		}
		ordinary := map[string]string{}
		for i, n := 0, rapid.IntRange(0, 3).Draw(t, "n-plain"); i < n; i++ {
			name := "X-Custom-" + strconv.Itoa(i)
			ordinary[name] = rapid.StringMatching(`[a-z0-9]{1,12}`).Draw(t, "plain")
			sent[randomCase(t, name, "plain-case")] = []string{ordinary[name]}
		}
		if rapid.Bool().Draw(t, "x-backend") {
			sent["X-Backend"] = []string{""}
		}
		back := http.Header{}
		for i, n := 0, rapid.IntRange(0, 6).Draw(t, "n-back"); i < n; i++ {
			back[dynamoName(t, "shim-dynamo")] = []string{headerValue.Draw(t, "bv")}
		}
		back["X-Upstream-Note"] = []string{"kept"}
		mu.Lock()
		answerHeaders = back
		mu.Unlock()

		before := len(shim.requests())
		stream := rapid.Bool().Draw(t, "stream")
		resp, body := f.post(pathChat, chatBody(clientModel, stream), sent)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		got := shim.requests()
		if len(got) != before+1 {
			t.Fatalf("the shim got %d requests, want 1", len(got)-before)
		}
		want := http.Header{}
		sel := f.picker.lastSelection()
		setPins(want, &sel)
		if g, w := dynamoHeaders(got[before].Header), dynamoHeaders(want); !equalMaps(g, w) {
			t.Fatalf("the shim saw Dynamo headers %v, want exactly the picker's %v", g, w)
		}
		for name, v := range ordinary {
			if got[before].Header.Get(name) != v {
				t.Fatalf("ordinary header %s lost on the way in", name)
			}
		}
		if d := dynamoHeaders(resp.Header); len(d) > 0 {
			t.Fatalf("Dynamo headers reached the client: %v", d)
		}
		if resp.Header.Get("X-Upstream-Note") != "kept" {
			t.Fatalf("ordinary response header lost")
		}
		if _, asked := sent["X-Backend"]; asked != (resp.Header.Get(hdrDiscloseBackend) == "dyn-a") {
			t.Fatalf("disclosure %q without matching x-backend (%v)", resp.Header.Get(hdrDiscloseBackend), asked)
		}
	})
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Raw (non-canonical) header map keys are stripped too: a handler mounted
// behind something that does not canonicalize is still safe.
func TestStripDynamoMatchesAnyCase(t *testing.T) {
	h := http.Header{
		"x-dynamo-worker-instance-id": {"1"}, "X-DYNAMO-DP-RANK": {"0"}, "X-Dynamo-": {"x"},
		"x-worker-instance-id": {"2"}, "X-DATA-PARALLEL-RANK": {"3"},
		"X-Dynamoish": {"keep"}, "X-Tenant-Id": {"keep"}, "Content-Type": {"keep"},
	}
	stripDynamo(h)
	assert.Equal(t, http.Header{"X-Dynamoish": {"keep"}, "X-Tenant-Id": {"keep"}, "Content-Type": {"keep"}}, h)
}

func TestOutboundHeadersDropConnectionScopedAndSecrets(t *testing.T) {
	h := outboundHeaders(http.Header{
		"Connection": {"keep-alive, X-Hop"}, "X-Hop": {"1"}, "Keep-Alive": {"timeout=5"},
		"Authorization": {"Bearer k"}, "Cookie": {"c=1"}, "Accept-Encoding": {"gzip"},
		"X-Backend": {""}, "Te": {"trailers"}, "User-Agent": {"sdk"}, "X-Dynamo-Dp-Rank": {"9"},
		"X-Switchyard-Backend": {"spoof"}, "x-switchyard-worker-instance-id": {"7"},
	})
	assert.Equal(t, http.Header{"User-Agent": {"sdk"}}, h)
}

// A client's x-switchyard-* headers, in any case, never reach a backend:
// the prefix is the router's own.
func TestClientSwitchyardHeadersAreNotForwarded(t *testing.T) {
	vllm := newUpstream(t, "vllm")
	f := newFixture(t, dynamoConfig(nil, backendFor(vllm, plainModel)), nil)
	resp, body := f.post(pathChat, chatBody(plainModel, false), http.Header{
		"X-Switchyard-Routing-Path": {"unified"}, "X-SWITCHYARD-TENANT": {"t"}, "X-Tenant": {"kept"},
	})
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	got := vllm.requests()[0].Header
	for k := range got {
		assert.False(t, hasPrefixFold(k, ownHeaderPrefix), "%s reached the backend", k)
	}
	assert.Equal(t, "kept", got.Get("X-Tenant"))
}

func TestSetPinsAndDisclose(t *testing.T) {
	sel := picker.Selection{Decode: picker.Pin{WorkerID: 10, DPRank: 0, DPDeclared: false}}
	h := http.Header{}
	setPins(h, &sel)
	assert.Equal(t, http.Header{hdrWorkerID: {"10"}}, h)

	sel.HasPrefill, sel.Prefill = true, picker.Pin{WorkerID: 11, DPRank: 2, DPDeclared: true}
	sel.Decode.DPDeclared = true
	h = http.Header{}
	setPins(h, &sel)
	assert.Equal(t, http.Header{hdrWorkerID: {"10"}, hdrDPRank: {"0"}, hdrPrefillID: {"11"}, hdrPrefillDPRank: {"2"}}, h)

	d := http.Header{}
	disclose(d, "a", &sel)
	disclose(d, "b", nil) // a fallback replaces the pinned attempt's disclosure
	require.Equal(t, http.Header{hdrDiscloseBackend: {"b"}}, d)
}

// The builtin client's path renders each upstream request as a Head; the
// net/http client's builds a header map. Both must send the same request:
// the same forwarded headers (connection-scoped ones, secrets, Dynamo and
// x-switchyard-* headers dropped), the pins, the body's type replacing the
// client's, Accept for streams, the path, the query and the body.
func TestBothUpstreamClientsSendTheSameRequest(t *testing.T) {
	sent := http.Header{
		"Connection": {"keep-alive, X-Hop"}, "X-Hop": {"1"}, "Keep-Alive": {"timeout=5"},
		"Authorization": {"Bearer k"}, "Cookie": {"c=1"}, "Accept-Encoding": {"gzip"},
		"X-Backend": {""}, "Te": {"trailers"}, "User-Agent": {"sdk"}, "X-Dynamo-Dp-Rank": {"9"},
		"X-Switchyard-Backend": {"spoof"}, "X-Tenant": {"a", "b"}, "Content-Type": {"application/json; charset=utf-8"},
		"Accept": {"application/json"},
	}
	got := map[string][]recorded{}
	for _, client := range []string{config.UpstreamClientBuiltin, config.UpstreamClientNetHTTP} {
		shim := newUpstream(t, "dyn-a")
		cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel))
		cfg.Gateway.UpstreamClient = client
		f := newFixture(t, cfg, []*discovery.Worker{
			withDP(worker("dynamo", prefillID, discovery.RolePrefill, clientModel), 0),
			withDP(worker("dynamo", decodeID, discovery.RoleDecode, clientModel), 1),
		})
		require.Equal(t, client == config.UpstreamClientBuiltin, f.gw.transport.heads() != nil, "%s: the Head path is the builtin client's", client)
		for _, stream := range []bool{false, true} {
			resp, body := f.post(pathChat+"?trace=1&x=%2F", chatBody(clientModel, stream), sent)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		}
		got[client] = shim.requests()
		require.Len(t, got[client], 2, client)
	}
	builtin, std := got[config.UpstreamClientBuiltin], got[config.UpstreamClientNetHTTP]
	for i := range builtin {
		b, s := builtin[i], std[i]
		assert.Equal(t, s.Header, b.Header, "request %d", i)
		assert.Equal(t, s.Path, b.Path)
		assert.Equal(t, "trace=1&x=%2F", b.Query)
		assert.Equal(t, s.Query, b.Query)
		assert.Equal(t, s.Body, b.Body)
	}
	h := builtin[0].Header
	assert.Equal(t, []string{"a", "b"}, h["X-Tenant"])
	assert.Equal(t, "application/json", h.Get("Content-Type"))
	assert.Equal(t, "application/json", h.Get("Accept"), "a buffered request keeps the client's Accept")
	assert.Equal(t, "text/event-stream", builtin[1].Header.Get("Accept"))
	assert.Equal(t, strconv.FormatUint(decodeID, 10), h.Get(hdrWorkerID))
	assert.Equal(t, "1", h.Get(hdrDPRank))
	assert.Equal(t, strconv.FormatUint(prefillID, 10), h.Get(hdrPrefillID))
	assert.Equal(t, "0", h.Get(hdrPrefillDPRank))
	for _, gone := range []string{"X-Hop", "Keep-Alive", "Authorization", "Cookie", "X-Backend", "Te", "X-Switchyard-Backend", "Connection"} {
		assert.Empty(t, h.Values(gone), gone)
	}
}
