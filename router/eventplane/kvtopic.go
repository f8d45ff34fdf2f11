package eventplane

import (
	"net/netip"

	"switchyard/router/kv"
)

// MaxKVTopicBytes bounds the topic frame the listener parses. A topic is
// "kv@" + an address + "@" + a model name; model names are short, and a
// longer frame is refused before it is looked at.
const MaxKVTopicBytes = 512

// KVTopic is what a vLLM publisher's topic frame says about its engine:
// the Pod IP it runs on and the model it serves.
type KVTopic struct {
	Addr  netip.Addr
	Model string
}

// ParseKVTopic reads a topic of the form kv@<ip>@<model>, as
// llm-d-inference-sim names it from its POD_IP, or kv@<ip>:<port>@<model>,
// llm-d's convention for vLLM (the port is ignored: the IP names the Pod).
// The split is kv.ParseVLLMTopic's; the address must be an IP address
// (IPv6 bare or, with a port, in brackets) with no zone, and the model is
// the rest of the topic after the second '@', not empty. Anything else,
// or a topic over MaxKVTopicBytes, is refused (false).
func ParseKVTopic(topic []byte) (KVTopic, bool) {
	if len(topic) > MaxKVTopicBytes {
		return KVTopic{}, false
	}
	host, model, ok := kv.ParseVLLMTopic(topic)
	if !ok {
		return KVTopic{}, false
	}
	addr, ok := parseTopicHost(string(host))
	if !ok {
		return KVTopic{}, false
	}
	return KVTopic{Addr: addr, Model: string(model)}, true
}

// parseTopicHost reads an IP address, or an IP address and port, with no
// zone: a Pod IP is never link-local-scoped.
func parseTopicHost(h string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(h); err == nil {
		return unzoned(a.Unmap())
	}
	ap, err := netip.ParseAddrPort(h)
	if err != nil {
		return netip.Addr{}, false
	}
	return unzoned(ap.Addr().Unmap())
}

func unzoned(a netip.Addr) (netip.Addr, bool) {
	if a.Zone() != "" || !a.IsValid() || a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a, true
}

// PeerMaySpeakFor is the listener's rule for which Pod a connection's
// messages may name: its own address only, so one Pod cannot publish
// blocks for another. Over loopback (a publisher on the picker's own host,
// as in tests where every Pod is 127.0.0.x) every source address is a
// loopback one whatever the Pod, so a loopback peer may speak for any
// loopback Pod address and for nothing else.
func PeerMaySpeakFor(peer, pod netip.Addr) bool {
	peer, pod = peer.Unmap(), pod.Unmap()
	if peer.IsLoopback() {
		return pod.IsLoopback()
	}
	return peer == pod
}
