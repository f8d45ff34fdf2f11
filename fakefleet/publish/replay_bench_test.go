package publish

import (
	"context"
	"switchyard/router/eventplane/replay"
	"testing"

	"switchyard/fakefleet/wire"
)

// BenchmarkReplayServe10k is one replay of a full 10,000-message buffer of
// kv-events messages from the fake fleet's ROUTER (zmq4) to the router's
// client over loopback, each rebuilt into its live form: the replay path
// the live tests exercise, end to end.
func BenchmarkReplayServe10k(b *testing.B) {
	p, err := New(KVEventsTopic)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	if err := p.ServeReplay(DefaultReplayBuffer); err != nil {
		b.Fatal(err)
	}
	p.DropNext(DefaultReplayBuffer) // kept for replay, nobody subscribed
	ev := wire.RouterEvent{WorkerID: 1, StorageTier: "device"}
	for range DefaultReplayBuffer {
		if err := p.sendKVEvent(ev); err != nil {
			b.Fatal(err)
		}
	}
	f := fetcher()
	ep := p.ReplayEndpoint()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		res, err := f.Fetch(context.Background(), ep, 1, func(seq uint64, payload [][]byte) error {
			_, err := replayDynamo(seq, payload)
			return err
		})
		if err != nil || res.Batches != DefaultReplayBuffer || !res.Ended {
			b.Fatalf("%+v, %v", res, err)
		}
	}
	b.ReportMetric(float64(b.N*DefaultReplayBuffer)/b.Elapsed().Seconds(), "batches/s")
}

var replayDynamo = replay.DynamoMessage
