package discovery

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/router/events"
)

// The worker's host comes from a TCP request-plane transport; anything
// that is not a plain IP address or DNS name yields none.
func TestTransportHost(t *testing.T) {
	for raw, want := range map[string]string{
		`{"tcp":"10.0.0.4:31000/1a7f2b/dynamo/prefill/generate"}`: "10.0.0.4",
		`{"tcp":"[fd00::7]:31000/x"}`:                             "fd00::7",
		`{"tcp":"worker-0.dynamo.svc.cluster.local:9000"}`:        "worker-0.dynamo.svc.cluster.local",
		`{"nats_tcp":"dynamo.prefill.generate-1a"}`:               "",
		`{"tcp":"10.0.0.4"}`:                                      "",
		`{"tcp":"bad host:1/x"}`:                                  "",
		`{"tcp":"a..b:1"}`:                                        "",
		`{"tcp":":1"}`:                                            "",
		`"tcp"`:                                                   "",
		``:                                                        "",
	} {
		require.Equal(t, want, transportHost(json.RawMessage(raw)), raw)
	}
}

// The port comes with the host, 0 when it is out of range or the host is
// refused.
func TestTransportAddressPort(t *testing.T) {
	for raw, want := range map[string]uint16{
		`{"tcp":"10.0.0.4:8000"}`:      8000,
		`{"tcp":"[fd00::7]:31000/x"}`:  31000,
		`{"tcp":"10.0.0.4:0"}`:         0,
		`{"tcp":"10.0.0.4:70000"}`:     0,
		`{"tcp":"bad host:8000"}`:      0,
		`{"nats_tcp":"dynamo.x:8000"}`: 0,
	} {
		_, port := transportAddress(json.RawMessage(raw))
		require.Equal(t, want, port, raw)
	}
	p, err := parseRecord("dynamo", events.Instances, []byte(`{"type":"Endpoint","component":"backend","endpoint":"generate","instance_id":7,"transport":{"tcp":"10.1.2.3:8000"}}`))
	require.NoError(t, err)
	require.Equal(t, uint16(8000), p.endpoint.port)
}

// The reducer carries the host onto the worker.
func TestWorkerHostFromEndpointRecord(t *testing.T) {
	p, err := parseRecord("dynamo", events.Instances, []byte(`{"type":"Endpoint","component":"backend","endpoint":"generate","instance_id":7,"transport":{"tcp":"10.1.2.3:4000/x"}}`))
	require.NoError(t, err)
	require.Equal(t, "10.1.2.3", p.endpoint.host)
}

// A new host in a worker's Endpoint record is a change of the worker, even
// when nothing else about it changed (not even the time).
func TestHostChangeIsAWorkerChange(t *testing.T) {
	r := NewReducer(nil, nil)
	at := time.Unix(1, 0)
	put := func(host string) {
		r.Apply(events.DiscoveryPut{At: at, Namespace: "dynamo", DiscoveryRecord: events.DiscoveryRecord{
			Keyspace: events.Instances, Key: "v1/instances/dynamo/backend/generate/7",
			Value: []byte(`{"type":"Endpoint","component":"backend","endpoint":"generate","instance_id":7,"transport":{"tcp":"` + host + `:9000/x"}}`)}})
	}
	put("10.0.0.1")
	require.Equal(t, "10.0.0.1", r.View().Workers[0].Host)
	put("10.0.0.2")
	require.Equal(t, "10.0.0.2", r.View().Workers[0].Host)
}
