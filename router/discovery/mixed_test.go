package discovery

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/router/events"
)

func TestMixedRolesWarnOncePerPairAndAreBounded(t *testing.T) {
	var logs bytes.Buffer
	f := NewFollower(NewReducer(slog.New(slog.NewTextHandler(&logs, nil)), nil), NewRegistry())
	worker := func(ns, comp string, id int, workerType string) []events.Event {
		return []events.Event{
			put(ns, fmt.Sprintf("v1/instances/%s/%s/generate/%x", ns, comp, id), endpointJSON(comp, "generate", id), t0),
			put(ns, fmt.Sprintf("v1/mdc/%s/%s/generate/%x", ns, comp, id), cardJSON(comp, "generate", id,
				map[string]any{"display_name": "m", "worker_type": workerType}), t0),
		}
	}
	warnings := func() int {
		return strings.Count(logs.String(), "mixed roles") + strings.Count(logs.String(), "beside prefill/decode")
	}

	f.Apply(worker("ns", "decode", 1, "decode"))
	require.Zero(t, warnings())
	f.Apply(worker("ns", "backend", 2, "aggregated"))
	require.Equal(t, 1, warnings(), "the namespace started mixing")
	require.Contains(t, logs.String(), "aggregated=1")
	f.Apply(worker("ns", "backend", 3, "aggregated"))
	require.Equal(t, 1, warnings(), "not repeated while it stays mixed")

	// Twelve namespaces start mixing in one publish: eight are named and the
	// rest summarized in one line.
	logs.Reset()
	var batch []events.Event
	for i := 0; i < 12; i++ {
		ns := fmt.Sprintf("g%02d", i)
		batch = append(batch, worker(ns, "prefill", 100+i, "prefill")...)
		batch = append(batch, worker(ns, "backend", 200+i, "aggregated")...)
	}
	f.Apply(batch)
	require.Equal(t, 8, strings.Count(logs.String(), "beside prefill/decode"))
	require.Equal(t, 1, strings.Count(logs.String(), "suppressed=4"))
}
