package discovery

import (
	"strings"

	"switchyard/router/events"
)

// Bucket roots of Dynamo's key-value discovery backend.
const (
	instancesRoot     = "v1/instances/"
	modelsRoot        = "v1/mdc/"
	eventChannelsRoot = "v1/event_channels/"
)

// Prefix is one watched key prefix of a namespace.
type Prefix struct {
	Keyspace events.Keyspace
	// Key is the etcd prefix, ending in '/'.
	Key string
	// legacy marks the older {ns}/{component}/{topic}/{id} channel layout,
	// which must have exactly three segments after the namespace.
	legacy bool
}

// Accepts reports whether key belongs to this prefix's layout. The legacy
// channel prefix of a namespace literally named "namespace" also sees the
// newer layout's keys; the segment count tells them apart.
func (p Prefix) Accepts(key string) bool {
	if !strings.HasPrefix(key, p.Key) {
		return false
	}
	if p.legacy {
		return strings.Count(key[len(p.Key):], "/") == 2
	}
	return true
}

// Prefixes lists the prefixes watched for one Dynamo namespace: instances,
// model cards, and event channels in both the scope-based (percent-encoded)
// and the older layout.
func Prefixes(namespace string) []Prefix {
	return []Prefix{
		{Keyspace: events.Instances, Key: instancesRoot + namespace + "/"},
		{Keyspace: events.Models, Key: modelsRoot + namespace + "/"},
		{Keyspace: events.EventChannels, Key: eventChannelsRoot + "namespace/" + EncodeSegment(namespace) + "/"},
		{Keyspace: events.EventChannels, Key: eventChannelsRoot + namespace + "/", legacy: true},
	}
}

// EncodeSegment applies Dynamo's event-scope percent-encoding: ASCII letters,
// digits, '-' and '_' pass through; every other byte becomes %XX (upper-case).
func EncodeSegment(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
