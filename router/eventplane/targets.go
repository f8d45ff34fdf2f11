package eventplane

import (
	"net"
	"sort"
	"strconv"
	"strings"

	"switchyard/router/discovery"
	"switchyard/router/envelope"
)

// Target is a publisher the router may subscribe to directly.
type Target struct {
	Namespace   string
	PublisherID uint64
	Topic       string
	Component   string
	// HostPort is the tcp:// endpoint without its scheme. Internal: never
	// exported by the admin API or metrics.
	HostPort string
	// ReplayEndpoint is the publisher's replay socket (tcp://host:port),
	// "" when it advertises none or one that fails the channel's own
	// transport rules (ReplayRefused says why). A change restarts the
	// subscription, as any change of its record does. Internal like
	// HostPort.
	ReplayEndpoint string
	ReplayRefused  string
}

// Skip is a channel that cannot become a subscription, and why.
type Skip struct {
	Namespace   string
	PublisherID uint64
	Topic       string
	// Result is Unsupported (a transport the router does not dial: ZmqBroker,
	// Nats, an unknown kind, a non-tcp scheme) or Malformed (an unusable
	// endpoint string).
	Result envelope.Result
	Reason string
}

// Targets picks the subscription targets of one topic from a snapshot:
// only direct Zmq channels with tcp://host:port endpoints. The result is
// ordered by publisher id (then namespace), the order admission follows.
func Targets(snap *discovery.Snapshot, topic string) ([]Target, []Skip) {
	var out []Target
	var skips []Skip
	for _, p := range snap.Publishers {
		if p.Topic != topic {
			continue
		}
		skip := func(r envelope.Result, reason string) {
			skips = append(skips, Skip{p.Namespace, p.PublisherID, p.Topic, r, reason})
		}
		if p.TransportKind != "Zmq" {
			skip(envelope.Unsupported, "transport kind "+strconv.Quote(p.TransportKind)+" is not dialed directly")
			continue
		}
		hostPort, r, reason := ZmqHostPort(p.Address)
		if reason != "" {
			skip(r, reason)
			continue
		}
		t := Target{Namespace: p.Namespace, PublisherID: p.PublisherID, Topic: topic,
			Component: p.Component, HostPort: hostPort}
		t.ReplayEndpoint, t.ReplayRefused = replayEndpoint(p)
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PublisherID != out[j].PublisherID {
			return out[i].PublisherID < out[j].PublisherID
		}
		return out[i].Namespace < out[j].Namespace
	})
	return out, skips
}

// ZmqHostPort checks a fleet-advertised Zmq endpoint, tcp://host:port with
// a port in 1-65535, and returns it without its scheme. A refusal says why
// and classifies it: Unsupported for another scheme, Malformed for an
// unusable endpoint; reason is "" when the endpoint is usable. Channels
// and their replay endpoints follow the same rule.
func ZmqHostPort(endpoint string) (hostPort string, refused envelope.Result, reason string) {
	hostPort, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", envelope.Unsupported, "endpoint scheme is not tcp://"
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil || host == "" {
		return "", envelope.Malformed, "endpoint is not tcp://host:port"
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return "", envelope.Malformed, "endpoint port is not 1-65535"
	}
	return hostPort, 0, ""
}

// replayEndpoint checks a channel's advertised replay socket under the
// channel's transport rules: a Zmq kind and a tcp://host:port endpoint.
func replayEndpoint(p *discovery.Publisher) (endpoint, refused string) {
	if p.ReplayKind == "" && p.ReplayAddress == "" {
		return "", ""
	}
	if p.ReplayKind != "Zmq" {
		return "", "replay transport kind " + strconv.Quote(p.ReplayKind) + " is not dialed directly"
	}
	if _, _, reason := ZmqHostPort(p.ReplayAddress); reason != "" {
		return "", "replay " + reason
	}
	return p.ReplayAddress, ""
}
