package expect

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"switchyard/router/core"
	"switchyard/router/picker"
)

func TestValidateAcceptsNoLostAndBareZero(t *testing.T) {
	var exps []Expectation
	require.NoError(t, yaml.Unmarshal([]byte(`
- no_lost: true
- counter: load.gap
  max: 0
- metric: failed
  max: 0
`), &exps))
	require.Empty(t, Validate(exps, 4))
	require.False(t, exps[1].Max.IsDuration, "a bare 0 is the number 0")

	require.NoError(t, yaml.Unmarshal([]byte("- metric: ttft_p90\n  max: 0\n"), &exps))
	errs := Validate(exps, 4)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error(), "expect[0].max: ttft_p90 is a latency")
}

func TestCollectorCountsPrefillReasonWithoutPrefillPin(t *testing.T) {
	start := time.Unix(0, 0)
	c := NewCollector(start, []uint64{7}, SLO{})
	c.Record(core.Selection{At: start.Add(time.Second), RequestID: 1, OK: true,
		Sel: picker.Selection{Decode: picker.Pin{WorkerID: 7}, DecodeReason: picker.ReasonLoad, PrefillReason: picker.ReasonNoPrefillPool}})
	ev := c.Evidence()
	require.Equal(t, 1, ev.Count("selection.prefill.no_prefill_pool", 0, time.Hour))
	require.Equal(t, 1, ev.Count("selection.decode.load", 0, time.Hour))
	require.Equal(t, -1, ev.Picks[0].Prefill)
}
