package etcdsource

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/router/events"
)

// streamer is the only part of the etcd client the watches touch.
type streamer interface {
	Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan
}

// update is one watch response, or the end of a watch channel, tagged with
// the index of its prefix in the pass's watch list.
type update struct {
	idx    int
	resp   clientv3.WatchResponse
	closed bool
}

// openWatches starts one watch per prefix from rev and merges their
// responses into one channel, so the pass folds them in one loop.
// WithRequireLeader makes a member that lost its leader cancel the watches
// instead of serving a stale view; WithCreatedNotify lets the pass know when
// every watch is really open. The forwarders exit when ctx ends (clientv3
// then closes the watch channels); wg lets the pass wait for them.
func openWatches(ctx context.Context, s streamer, list []watched, rev int64, wg *sync.WaitGroup) <-chan update {
	out := make(chan update)
	wctx := clientv3.WithRequireLeader(ctx)
	for i, w := range list {
		ch := s.Watch(wctx, w.Key, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithCreatedNotify())
		wg.Add(1)
		go forward(ctx, i, ch, out, wg)
	}
	return out
}

// forward copies one watch channel into the merged one. After ctx ends it
// keeps draining, dropping responses, so clientv3 is never left blocked on
// a channel nobody reads.
func forward(ctx context.Context, idx int, ch clientv3.WatchChan, out chan<- update, wg *sync.WaitGroup) {
	defer wg.Done()
	for resp := range ch {
		select {
		case out <- update{idx: idx, resp: resp}:
		case <-ctx.Done():
		}
	}
	select {
	case out <- update{idx: idx, closed: true}:
	case <-ctx.Done():
	}
}

// fold turns one watch response into discovery events. Keys under the
// prefix that do not fit its layout are skipped, as in the snapshot.
func fold(w watched, resp *clientv3.WatchResponse, at time.Time) []events.Event {
	var out []events.Event
	for _, ev := range resp.Events {
		key := string(ev.Kv.Key)
		if !w.Accepts(key) {
			continue
		}
		switch ev.Type {
		case clientv3.EventTypePut:
			out = append(out, events.DiscoveryPut{
				At:              at,
				Namespace:       w.namespace,
				DiscoveryRecord: events.DiscoveryRecord{Keyspace: w.Keyspace, Key: key, Value: ev.Kv.Value},
				Revision:        ev.Kv.ModRevision,
			})
		case clientv3.EventTypeDelete:
			out = append(out, events.DiscoveryDelete{
				At:        at,
				Namespace: w.namespace,
				Keyspace:  w.Keyspace,
				Key:       key,
				Revision:  ev.Kv.ModRevision,
			})
		}
	}
	return out
}
