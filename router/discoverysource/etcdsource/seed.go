package etcdsource

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"switchyard/router/discovery"
	"switchyard/router/events"
)

const (
	// maxSeedRecords caps the records a snapshot keeps per prefix: one more
	// than the reducer holds per keyspace, so the reducer still sees (and
	// counts) the overflow while a hostile keyspace cannot make a snapshot
	// unbounded.
	maxSeedRecords = 16384 + 1
	// seedPageSize is the records per range response. etcd values may be up
	// to its request limit (1.5 MiB by default), so pages stay small enough
	// that one response cannot balloon.
	seedPageSize = 128
)

// maxResponseBytes caps one gRPC response the client accepts, so a page of
// huge fleet-written values cannot balloon the router. It must exceed the
// reducer's 16 MiB record ceiling; a page over it is re-read in smaller
// pages, and a single value over it is skipped. A variable for tests.
var maxResponseBytes = 64 << 20

// ranger is the only part of the etcd client a snapshot may touch.
type ranger interface {
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
}

// watched pairs a prefix with the namespace it was derived from, so events
// carry the namespace of the prefix, never one read from a value.
type watched struct {
	namespace string
	discovery.Prefix
}

// watchList is every prefix of every namespace, in config order.
func watchList(namespaces []string) []watched {
	var out []watched
	for _, ns := range namespaces {
		for _, p := range discovery.Prefixes(ns) {
			out = append(out, watched{namespace: ns, Prefix: p})
		}
	}
	return out
}

// snapshot is the result of one pass's range gets.
type snapshot struct {
	// revision is the store revision every get read at.
	revision int64
	// records holds each namespace's accepted records.
	records map[string][]events.DiscoveryRecord
	// truncated lists prefixes that held more than maxSeedRecords.
	truncated []string
	// skipped lists keys whose value alone exceeded maxResponseBytes.
	skipped []string
}

// takeSnapshot range-gets every prefix at a single revision: the first
// response fixes it and every later page and prefix reads WithRev(it). One
// revision for the whole pass keeps the namespaces' views mutually
// consistent and gives each watch the same, gapless start (revision+1).
func takeSnapshot(ctx context.Context, r ranger, list []watched) (snapshot, error) {
	s := snapshot{records: make(map[string][]events.DiscoveryRecord)}
	for _, w := range list {
		kvs, full, err := readPrefix(ctx, r, w.Prefix, &s.revision, &s.skipped)
		if err != nil {
			return s, err
		}
		if full {
			s.truncated = append(s.truncated, w.Key)
		}
		s.records[w.namespace] = append(s.records[w.namespace], kvs...)
	}
	return s, nil
}

// readPrefix pages through one prefix. *rev == 0 means no revision is
// fixed yet; the first response fixes it.
func readPrefix(ctx context.Context, r ranger, p discovery.Prefix, rev *int64, skipped *[]string) (out []events.DiscoveryRecord, truncated bool, err error) {
	end := clientv3.GetPrefixRangeEnd(p.Key)
	key := p.Key
	limit := int64(seedPageSize)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(limit)}
		if *rev != 0 {
			opts = append(opts, clientv3.WithRev(*rev))
		}
		resp, err := r.Get(ctx, key, opts...)
		if status.Code(err) == codes.ResourceExhausted {
			if limit > 1 {
				limit = max(limit/2, 1) // the page was too large: smaller pages
				continue
			}
			// One value alone is over the ceiling: name it and step past it.
			next, err := skipKey(ctx, r, key, end, *rev)
			if err != nil || next == "" {
				return out, false, err
			}
			*skipped = append(*skipped, next)
			key = next + "\x00"
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if *rev == 0 {
			*rev = resp.Header.GetRevision()
		}
		for _, kv := range resp.Kvs {
			k := string(kv.Key)
			if !p.Accepts(k) {
				continue
			}
			if len(out) == maxSeedRecords {
				return out, true, nil
			}
			out = append(out, events.DiscoveryRecord{Keyspace: p.Keyspace, Key: k, Value: kv.Value})
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, false, nil
		}
		// Keys come back in ascending order; the next page starts just
		// after the last key read.
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// skipKey reads the key (not the value) at the start of a range, so an
// oversized value can be stepped over. It returns "" when none is left.
func skipKey(ctx context.Context, r ranger, key, end string, rev int64) (string, error) {
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1), clientv3.WithKeysOnly()}
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := r.Get(ctx, key, opts...)
	if err != nil || len(resp.Kvs) == 0 {
		return "", err
	}
	return string(resp.Kvs[0].Key), nil
}
