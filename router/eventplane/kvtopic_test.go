package eventplane_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"switchyard/router/eventplane"
)

// Topics as llm-d-inference-sim (kv@<POD_IP>@<model>) and llm-d's vLLM
// convention (kv@<ip>:<port>@<model>) write them; anything else is
// refused.
func TestParseKVTopic(t *testing.T) {
	for _, tc := range []struct {
		topic, addr, model string
	}{
		{"kv@10.1.2.3@meta-llama/Llama-3.1-8B-Instruct", "10.1.2.3", "meta-llama/Llama-3.1-8B-Instruct"},
		{"kv@10.1.2.3:5557@qwen", "10.1.2.3", "qwen"},
		{"kv@fd00::7@m", "fd00::7", "m"},
		{"kv@[fd00::7]:5557@m", "fd00::7", "m"},
		{"kv@::ffff:10.0.0.1@m", "10.0.0.1", "m"},
		{"kv@127.0.0.2@model@with@ats", "127.0.0.2", "model@with@ats"},
	} {
		got, ok := eventplane.ParseKVTopic([]byte(tc.topic))
		if assert.True(t, ok, tc.topic) {
			assert.Equal(t, netip.MustParseAddr(tc.addr), got.Addr, tc.topic)
			assert.Equal(t, tc.model, got.Model, tc.topic)
		}
	}
	for _, bad := range []string{
		"", "kv", "kv@", "kv@10.0.0.1", "kv@10.0.0.1@", "kv@@m", "KV@10.0.0.1@m", "kv.10.0.0.1@m",
		"kv@pod-a@m", "kv@10.0.0.256@m", "kv@0.0.0.0@m", "kv@::@m", "kv@fe80::1%eth0@m", "kv@10.0.0.1:99999@m",
		"kv@10.0.0.1:@m", "kv@fd00::7:5557:x@m", "kv@10.0.0.1@" + strings.Repeat("m", eventplane.MaxKVTopicBytes),
	} {
		_, ok := eventplane.ParseKVTopic([]byte(bad))
		assert.False(t, ok, "%q", bad)
	}
}

// A connection speaks for its own address; over loopback, for any
// loopback Pod and nothing else.
func TestPeerMaySpeakFor(t *testing.T) {
	a := netip.MustParseAddr
	assert.True(t, eventplane.PeerMaySpeakFor(a("10.0.0.1"), a("10.0.0.1")))
	assert.True(t, eventplane.PeerMaySpeakFor(a("::ffff:10.0.0.1"), a("10.0.0.1")))
	assert.False(t, eventplane.PeerMaySpeakFor(a("10.0.0.1"), a("10.0.0.2")))
	assert.False(t, eventplane.PeerMaySpeakFor(a("10.0.0.1"), a("127.0.0.1")))
	assert.True(t, eventplane.PeerMaySpeakFor(a("127.0.0.1"), a("127.0.0.3")))
	assert.True(t, eventplane.PeerMaySpeakFor(a("::1"), a("127.0.0.3")))
	assert.False(t, eventplane.PeerMaySpeakFor(a("127.0.0.1"), a("10.0.0.2")))
	assert.False(t, eventplane.PeerMaySpeakFor(netip.Addr{}, a("10.0.0.2")))
}

// FuzzParseKVTopic: no topic panics, and an accepted one names a usable
// address and a model, and reads the same written back bare.
func FuzzParseKVTopic(f *testing.F) {
	for _, s := range []string{"kv@10.1.2.3@m", "kv@10.1.2.3:5557@m", "kv@[fd00::7]:1@m", "kv@fe80::1%x@m", "kv@@", "kv@1.2.3.4@@"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, topic []byte) {
		got, ok := eventplane.ParseKVTopic(topic)
		if !ok {
			return
		}
		if !got.Addr.IsValid() || got.Addr.IsUnspecified() || got.Addr.Zone() != "" || got.Model == "" || got.Addr.Is4In6() {
			t.Fatalf("%q accepted as %+v", topic, got)
		}
		again, ok := eventplane.ParseKVTopic([]byte("kv@" + got.Addr.String() + "@" + got.Model))
		if !ok || again != got {
			t.Fatalf("%q: %+v does not read back (%+v, %v)", topic, got, again, ok)
		}
	})
}
