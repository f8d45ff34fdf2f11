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
		hostPort, ok := strings.CutPrefix(p.Address, "tcp://")
		if !ok {
			skip(envelope.Unsupported, "endpoint scheme is not tcp://")
			continue
		}
		host, port, err := net.SplitHostPort(hostPort)
		if err != nil || host == "" {
			skip(envelope.Malformed, "endpoint is not tcp://host:port")
			continue
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			skip(envelope.Malformed, "endpoint port is not 1-65535")
			continue
		}
		out = append(out, Target{Namespace: p.Namespace, PublisherID: p.PublisherID, Topic: topic,
			Component: p.Component, HostPort: hostPort})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PublisherID != out[j].PublisherID {
			return out[i].PublisherID < out[j].PublisherID
		}
		return out[i].Namespace < out[j].Namespace
	})
	return out, skips
}
