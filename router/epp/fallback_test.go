package epp_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"switchyard/router/clock"
	"switchyard/router/epp"
	"switchyard/router/picker"
)

var fallbackTransports = []string{"10.0.0.1:9000/x", "10.0.0.2:9000/x", "10.0.0.3:9000/x", "no-port/x"}

func newFallbackHarness(t *testing.T, st epp.Settings, outcomes *[]epp.Outcome) *harness {
	t.Helper()
	clk := clock.NewManual(t0)
	shared := fleetSharedWith(t, clk, picker.NameKV, fallbackTransports...)
	h := &harness{picks: newCountingPicker(shared), clk: clk}
	h.srv = epp.New(st, epp.Options{Picker: h.picks, Workers: shared, Clock: clk, Metrics: sharedMetrics,
		OnOutcome: func(o epp.Outcome) { *outcomes = append(*outcomes, o) }})
	return h
}

// With fallbacks, the destination lists the pick and then the next-best
// candidates by the picker's cost, one per addressable endpoint, in the
// header and the envoy.lb metadata alike; the worker pins stay the
// pick's.
func TestFallbackEndpointsFollowThePick(t *testing.T) {
	st := defaultSettings()
	st.Fallbacks = 2
	var outcomes []epp.Outcome
	h := newFallbackHarness(t, st, &outcomes)
	out := h.process(t, requestHeaders(false, chatPath), requestBody(chatBody(testModel), true))
	set, _, lb := routed(t, out)
	require.Equal(t, lb, set[epp.DestinationHeader])
	list := strings.Split(lb, ",")
	require.Len(t, list, 3, "the pick and two fallbacks: %s", lb)
	require.ElementsMatch(t, []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}, list, "the worker without an address is left out")
	require.Equal(t, "33", set[epp.HeaderWorkerID], "the pins name the pick, the first endpoint")
	require.Equal(t, "10.0.0.1:8000", list[0])

	// One fallback only, and a subset that excludes the second worker.
	st.Fallbacks = 1
	h = newFallbackHarness(t, st, &outcomes)
	out = h.process(t, withSubset(requestHeaders(false, chatPath), false, "10.0.0.1:8000", "10.0.0.3:8000"), requestBody(chatBody(testModel), true))
	_, _, lb = routed(t, out)
	require.Equal(t, "10.0.0.1:8000,10.0.0.3:8000", lb)

	// Without fallbacks the destination is the pick alone.
	h = newFallbackHarness(t, defaultSettings(), &outcomes)
	_, _, lb = routed(t, h.process(t, requestHeaders(false, chatPath), requestBody(chatBody(testModel), true)))
	require.Equal(t, "10.0.0.1:8000", lb)
}

// A response served by a fallback releases the pick at once (its worker
// never held the request) and only once; the outcome is still recorded.
// An endpoint outside the list is counted as the gateway's own choice.
func TestServedFallbackReleasesThePick(t *testing.T) {
	st := defaultSettings()
	st.Fallbacks = 2
	var outcomes []epp.Outcome
	h := newFallbackHarness(t, st, &outcomes)
	fallback, elsewhere := testutil.ToFloat64(sharedMetrics.FallbackServed), testutil.ToFloat64(sharedMetrics.ServedElsewhere)
	out := h.process(t, requestHeaders(false, chatPath), requestBody(chatBody(testModel), true),
		withServed(responseHeaders(false, hv(":status", "200")), "10.0.0.3:8000"), responseBody("{}", true))
	require.NotEmpty(t, out)
	require.Equal(t, fallback+1, testutil.ToFloat64(sharedMetrics.FallbackServed))
	require.Equal(t, elsewhere, testutil.ToFloat64(sharedMetrics.ServedElsewhere))
	require.Empty(t, h.picks.balanced(), "released once, when the fallback answered")
	require.Len(t, outcomes, 1)
	require.Equal(t, epp.OutcomeOK, outcomes[0].Status)

	h = newFallbackHarness(t, st, &outcomes)
	h.process(t, requestHeaders(false, chatPath), requestBody(chatBody(testModel), true),
		withServed(responseHeaders(false, hv(":status", "200")), "192.0.2.9:8000"), responseBody("{}", true))
	require.Equal(t, elsewhere+1, testutil.ToFloat64(sharedMetrics.ServedElsewhere))
	require.Equal(t, fallback+1, testutil.ToFloat64(sharedMetrics.FallbackServed))
	require.Empty(t, h.picks.balanced())
}
