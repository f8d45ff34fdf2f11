package discovery

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"switchyard/fixtures"
	"switchyard/router/events"
)

var t0 = time.Date(2026, 9, 23, 4, 11, 2, 0, time.UTC)

func keyspaceOf(key string) events.Keyspace {
	switch {
	case strings.HasPrefix(key, instancesRoot):
		return events.Instances
	case strings.HasPrefix(key, modelsRoot):
		return events.Models
	case strings.HasPrefix(key, eventChannelsRoot):
		return events.EventChannels
	}
	panic("fixture key outside the watched buckets: " + key)
}

func put(ns, key string, value any, at time.Time) events.DiscoveryPut {
	var b []byte
	switch v := value.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			panic(err)
		}
	}
	return events.DiscoveryPut{At: at, Namespace: ns, DiscoveryRecord: events.DiscoveryRecord{Keyspace: keyspaceOf(key), Key: key, Value: b}}
}

func del(ns, key string, at time.Time) events.DiscoveryDelete {
	return events.DiscoveryDelete{At: at, Namespace: ns, Keyspace: keyspaceOf(key), Key: key}
}

func loadFixture(t testing.TB, name string) []events.DiscoveryRecord {
	t.Helper()
	recs, err := fixtures.EtcdFleet(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]events.DiscoveryRecord, len(recs))
	for i, r := range recs {
		out[i] = events.DiscoveryRecord{Keyspace: keyspaceOf(r.Key), Key: r.Key, Value: r.Value}
	}
	return out
}

// counter records counted kinds.
type counter map[string]int

func (c counter) inc(kind string) { c[kind]++ }

func fold(r *Reducer, evs ...events.Event) *View {
	for _, e := range evs {
		r.Apply(e)
	}
	return r.View()
}

func endpointJSON(component, endpoint string, id any) map[string]any {
	return map[string]any{"type": "Endpoint", "namespace": "dynamo", "component": component,
		"endpoint": endpoint, "instance_id": id, "transport": map[string]any{"tcp": "127.0.0.1:1/x"}}
}

func cardJSON(component, endpoint string, id any, card map[string]any) map[string]any {
	return map[string]any{"type": "Model", "namespace": "dynamo", "component": component,
		"endpoint": endpoint, "instance_id": id, "card_json": card}
}

func channelJSON(topic string, id any, endpoint string) map[string]any {
	return map[string]any{"type": "EventChannel", "topic": topic, "instance_id": id,
		"scope":     map[string]any{"kind": "endpoint", "endpoint": map[string]any{"namespace": "dynamo", "component": "decode", "name": "generate"}},
		"transport": map[string]any{"kind": "Zmq", "config": map[string]any{"endpoint": endpoint}}}
}
