package discovery

import (
	"testing"
)

// The replay extension field is carried as written; one the router cannot
// read means no replay, never a lost channel.
func TestChannelReplayField(t *testing.T) {
	zmq := func(ep string) map[string]any {
		return map[string]any{"kind": "Zmq", "config": map[string]any{"endpoint": ep}}
	}
	cases := []struct {
		name       string
		replay     any
		kind, addr string
	}{
		{"none", nil, "", ""},
		{"zmq", zmq("tcp://10.0.0.1:5558"), "Zmq", "tcp://10.0.0.1:5558"},
		{"other kind", map[string]any{"kind": "Nats", "config": map[string]any{"endpoint": "x"}}, "Nats", "x"},
		{"not an object", "tcp://10.0.0.1:5558", "", ""},
		{"null", "null-json", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := channelJSON(TopicKVEvents, 7, "tcp://10.0.0.1:5557")
			switch c.replay {
			case nil:
			case "null-json":
				rec["replay"] = nil
			default:
				rec["replay"] = c.replay
			}
			key := eventChannelsRoot + "namespace/dynamo/component/decode/endpoint/generate/topic/kv-events/7"
			v := fold(NewReducer(nil, nil), put("dynamo", key, rec, t0))
			if len(v.Publishers) != 1 {
				t.Fatalf("%d publishers", len(v.Publishers))
			}
			p := v.Publishers[0]
			if p.Address != "tcp://10.0.0.1:5557" || p.ReplayKind != c.kind || p.ReplayAddress != c.addr {
				t.Fatalf("publisher %+v", *p)
			}
		})
	}
}
