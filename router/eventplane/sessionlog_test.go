package eventplane_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/internal/syncbuf"
	"switchyard/router/clock"
	"switchyard/router/discovery"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
	"switchyard/router/load"
)

// jsonRecords parses the JSON log records written to logs so far.
func jsonRecords(logs *syncbuf.Buffer) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// A publisher that closes an established session (a departing worker) is
// logged at INFO; only the redial that then fails is a warning.
func TestPublisherClosingIsNoWarningButAFailedRedialIs(t *testing.T) {
	const worker, pid = 11, 21
	addr := freePort(t)
	pub := zmq4Pub(t, addr)
	logs := &syncbuf.Buffer{}
	counts := &resultCounts{}
	store := load.NewStore(counts.inc)
	allow, err := eventplane.ParseAllow([]string{"127.0.0.0/8"})
	require.NoError(t, err)
	sup := eventplane.NewSupervisor(eventplane.Family{Topic: discovery.TopicLoad, Limits: envelope.LoadLimits,
		Sink: load.Subscriber{Store: store}}, eventplane.Policy{Transport: eventplane.TransportDirect,
		Dialer: &eventplane.Dialer{Allow: allow}}, clock.Real{}, slog.New(slog.NewJSONHandler(logs, nil)), counts.inc)
	defer sup.Stop()
	sup.Reconcile(fleet(worker, pid, "tcp://"+addr))
	eventually(t, "a connection", func() bool { return sup.Subscriptions()[0].State == eventplane.Connected })

	pub.Close()
	byLevel := func(level string) []map[string]any {
		var out []map[string]any
		for _, r := range jsonRecords(logs) {
			if r["level"] == level && strings.Contains(r["msg"].(string), "subscription") {
				out = append(out, r)
			}
		}
		return out
	}
	eventually(t, "the failed redial's warning", func() bool { return len(byLevel("WARN")) > 0 })
	infos := byLevel("INFO")
	require.Len(t, infos, 1, "%v", jsonRecords(logs))
	require.Contains(t, infos[0]["msg"], "closed by its publisher")
	warn := byLevel("WARN")[0]
	require.Contains(t, warn["error"], "connection refused")
}
