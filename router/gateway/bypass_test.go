package gateway

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/discovery"
	"switchyard/router/kv"
	"switchyard/router/load"
	"switchyard/router/metrics"
	"switchyard/router/picker"
)

// bypassPicker answers what rrPicker would, marked as a conditional-
// disaggregation bypass. keepPrefill leaves the prefill pin in the
// selection too: the gateway must still send the decode pin alone.
type bypassPicker struct {
	rrPicker
	keepPrefill bool
}

func (p *bypassPicker) Pick(req picker.Request, snap *discovery.Snapshot) (picker.Selection, bool) {
	sel, ok := p.rrPicker.Pick(req, snap)
	sel.Bypass = true
	sel.DecodeReason, sel.PrefillReason = picker.ReasonConditionalBypass, picker.ReasonConditionalBypass
	if !p.keepPrefill {
		sel.HasPrefill, sel.Prefill = false, picker.Pin{}
	}
	return sel, ok
}

// spoofRoutingPath answers as usual, plus a routing-path header of the
// upstream's own that must never reach the client.
func spoofRoutingPath(w http.ResponseWriter, r *http.Request, body []byte) {
	w.Header().Set("X-Switchyard-Routing-Path", "spoofed")
	answer(w, r, body, "ok")
}

// A bypassed selection pins the decode worker alone (its rank header as
// usual, no prefill pin), is counted on the unified routing path, and tells
// a client that asked for disclosure x-switchyard-routing-path: unified,
// buffered and streaming alike. Nobody else sees the header, and an
// upstream's own is dropped.
func TestConditionalBypassPinsTheDecodeWorkerAlone(t *testing.T) {
	for _, keepPrefill := range []bool{false, true} {
		t.Run("keepPrefill="+strconv.FormatBool(keepPrefill), func(t *testing.T) {
			shim := newUpstream(t, "dyn-a")
			shim.setRespond(spoofRoutingPath)
			cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel))
			reg := discovery.NewRegistry()
			publish(reg,
				withDP(worker("dynamo", prefillID, discovery.RolePrefill, clientModel), 0),
				withDP(worker("dynamo", decodeID, discovery.RoleDecode, clientModel), 3),
			)
			m := metrics.New()
			p := &bypassPicker{keepPrefill: keepPrefill}
			gw := New(cfg, Options{Registry: reg, Pinner: newTestPinner(reg, p), Metrics: m.Gateway, Log: slog.New(slog.DiscardHandler)})
			srv := httptest.NewServer(StripDynamoHeaders(gw.Handler()))
			t.Cleanup(func() { srv.Close(); gw.Close() })
			f := &fixture{t: t, gw: gw, srv: srv, reg: reg, metrics: m}

			disclose := http.Header{"X-Backend": {""}}
			for i, stream := range []bool{false, true} {
				resp, body := f.post(pathChat, chatBody(clientModel, stream), disclose)
				require.Equal(t, 200, resp.StatusCode, string(body))
				assert.Equal(t, "unified", resp.Header.Get("X-Switchyard-Routing-Path"))
				assert.Equal(t, strconv.FormatUint(decodeID, 10), resp.Header.Get("X-Switchyard-Worker-Instance-Id"))
				assert.Empty(t, resp.Header.Get("X-Switchyard-Prefill-Instance-Id"), "no prefill worker served it")
				got := shim.requests()
				require.Len(t, got, i+1)
				assert.Equal(t, map[string]string{
					"x-dynamo-worker-instance-id": strconv.FormatUint(decodeID, 10),
					"x-dynamo-dp-rank":            "3",
				}, dynamoHeaders(got[i].Header), "the decode pin alone")
			}
			resp, body := f.post(pathChat, chatBody(clientModel, false), nil)
			require.Equal(t, 200, resp.StatusCode, string(body))
			assert.Empty(t, resp.Header.Values("X-Switchyard-Routing-Path"), "disclosed only to a client sending x-backend")
			eventuallyCount(t, f, 3, "routing_path", metrics.PathUnified)
			assert.Zero(t, counter(t, f, "routing_path", metrics.PathDisaggregated))
			assert.Zero(t, counter(t, f, "routing_path", metrics.PathAggregated))
		})
	}
}

// The real KV-aware picker with conditional disaggregation: a short
// prompt with nothing cached on the decode worker is prefilled there, so
// the request goes out with the decode pin alone, and the picker counts
// the selection as conditional_bypass (both roles) and its KV result as
// bypass. With conditional disaggregation off, the same request is a pair.
func TestRealKVPickerBypass(t *testing.T) {
	shim := newUpstream(t, "dyn-a")
	cfg := dynamoConfig([]string{"dyn-a"}, backendFor(shim, clientModel))
	reg := discovery.NewRegistry()
	publish(reg,
		worker("dynamo", prefillID, discovery.RolePrefill, clientModel),
		worker("dynamo", decodeID, discovery.RoleDecode, clientModel),
	)
	store := load.NewStore(nil)
	store.SetLive(reg.Snapshot())
	tracker := kv.NewTracker(nil)
	tracker.SetLive(reg.Snapshot())
	m := metrics.New()
	opts := picker.DefaultKVOptions()
	opts.ConditionalDisagg = true
	p, err := picker.New(picker.NameKV, picker.Deps{Store: store, Tracker: tracker, KV: opts,
		Count: m.Selection.Count, KVCount: m.KV.CountSelection})
	require.NoError(t, err)
	gw := New(cfg, Options{Registry: reg, Pinner: newTestPinner(reg, p), Metrics: m.Gateway, Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() { srv.Close(); gw.Close() })
	f := &fixture{t: t, gw: gw, srv: srv, reg: reg, metrics: m}

	resp, body := f.post(pathChat, chatBody(clientModel, false), http.Header{"X-Backend": {""}})
	require.Equal(t, 200, resp.StatusCode, string(body))
	assert.Equal(t, "unified", resp.Header.Get("X-Switchyard-Routing-Path"))
	got := shim.requests()
	require.Len(t, got, 1)
	assert.Equal(t, map[string]string{"x-dynamo-worker-instance-id": strconv.FormatUint(decodeID, 10)}, dynamoHeaders(got[0].Header))
	for _, role := range []string{"decode", "prefill"} {
		assert.Equal(t, 1.0, testutil.ToFloat64(m.Selection.Total.WithLabelValues(role, picker.ReasonConditionalBypass)), role)
	}
	assert.Equal(t, 1.0, testutil.ToFloat64(m.KV.Selection.WithLabelValues(picker.KVBypass)))
	eventuallyCount(t, f, 1, "routing_path", metrics.PathUnified)

	p.(interface{ SetKVOptions(picker.KVOptions) }).SetKVOptions(picker.DefaultKVOptions())
	resp, body = f.post(pathChat, chatBody(clientModel, false), http.Header{"X-Backend": {""}})
	require.Equal(t, 200, resp.StatusCode, string(body))
	assert.Empty(t, resp.Header.Values("X-Switchyard-Routing-Path"))
	got = shim.requests()
	require.Len(t, got, 2)
	assert.Equal(t, map[string]string{
		"x-dynamo-worker-instance-id":  strconv.FormatUint(decodeID, 10),
		"x-dynamo-prefill-instance-id": strconv.FormatUint(prefillID, 10),
	}, dynamoHeaders(got[1].Header))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.KV.Selection.WithLabelValues(picker.KVTokenizerUnavailable)),
		"client requests carry no token ids")
	eventuallyCount(t, f, 1, "routing_path", metrics.PathDisaggregated)
}
