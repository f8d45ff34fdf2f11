package core

import (
	"testing"

	"switchyard/router/events"
)

// benchStream is long enough that restarting it (a lost publisher and a
// new subscription) costs little per message.
const benchStream = 1 << 14

// BenchmarkKVMessage is one live kv-events message through the core,
// without and with a replay offer on its subscription: the cost gap
// recovery adds to every message when nothing is lost.
func BenchmarkKVMessage(b *testing.B) {
	for _, replay := range []bool{false, true} {
		name := map[bool]string{false: "no_replay", true: "replay"}[replay]
		b.Run(name, func(b *testing.B) {
			c, _, _ := replayCore(b, replayOn, replay)
			c.SetPort(nil) // a port that keeps every output would be the cost measured
			msgs := stream(benchStream)
			i := 1
			b.ReportAllocs()
			for b.Loop() {
				if i == len(msgs) {
					c.KVPublisherLost(events.KVPublisherLost{At: replayT0, Namespace: "dynamo", PublisherID: replayPub})
					c.KVSubscribed(events.KVSubscribed{At: replayT0, Namespace: "dynamo", PublisherID: replayPub, Replay: replay})
					i = 1
				}
				c.KVMessage(msgs[i])
				i++
			}
		})
	}
}

// BenchmarkKVReplayRecovery is one whole recovery: a lost message, four
// live messages held behind it, the replayed one, the end and the
// release.
func BenchmarkKVReplayRecovery(b *testing.B) {
	c, _, _ := replayCore(b, replayOn, true)
	c.SetPort(nil)
	msgs := stream(benchStream)
	i := 1
	b.ReportAllocs()
	for b.Loop() {
		if i+6 > len(msgs) {
			c.KVPublisherLost(events.KVPublisherLost{At: replayT0, Namespace: "dynamo", PublisherID: replayPub})
			c.KVSubscribed(events.KVSubscribed{At: replayT0, Namespace: "dynamo", PublisherID: replayPub, Replay: true})
			i = 1
		}
		c.KVMessage(msgs[i])
		for _, m := range msgs[i+2 : i+6] {
			c.KVMessage(m)
		}
		c.KVReplayed(replayed(msgs[i+1], replayT0))
		c.KVReplayEnd(end(replayT0, ""))
		i += 6
	}
}
