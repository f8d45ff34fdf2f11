package etcdsource

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"
)

// pass runs one get-then-watch cycle and reports why it ended. Every
// goroutine it starts has exited when it returns.
func (w *Watcher) pass(ctx context.Context) passEnd {
	w.mu.Lock()
	w.status.Passes++
	w.mu.Unlock()

	var wg sync.WaitGroup
	defer wg.Wait()
	passCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	seedCtx, seedCancel := context.WithTimeout(passCtx, seedTimeout)
	defer seedCancel()

	cli, err := w.dial(passCtx)
	if err != nil {
		return failed("connect", err, false)
	}
	// Closing the client closes the connection and every watch channel, so
	// the forwarders and the connection monitor end before wg.Wait.
	defer cli.Close()
	lost := watchConnection(passCtx, cli.ActiveConnection(), &wg)

	snap, err := takeSnapshot(seedCtx, cli, w.list)
	if err != nil {
		return failed("range get", err, false)
	}
	w.deliverSnapshot(snap)
	if w.beforeWatch != nil {
		w.beforeWatch()
	}
	updates := openWatches(passCtx, cli, w.list, snap.revision+1, &wg)
	return w.follow(passCtx, seedCtx, updates, lost)
}

// dial makes the pass's client. clientv3 runs Authenticate inside New when
// credentials are set, bounded by DialTimeout.
func (w *Watcher) dial(ctx context.Context) (*clientv3.Client, error) {
	tc, err := w.cfg.tlsConfig()
	if err != nil {
		return nil, safef("tls: %v", err)
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   w.cfg.Endpoints,
		DialTimeout: seedTimeout,
		// Keepalive pings notice a peer that vanished without closing the
		// connection, so the connection monitor sees it leave Ready.
		// etcd refuses pings more often than every 5 s.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		TLS:                  tc,
		Username:             w.cfg.Username,
		Password:             w.cfg.Password,
		Context:              ctx,
		// clientv3's own retry chatter would duplicate the pass-level log.
		Logger: zap.NewNop(),
	})
}

// follow folds watch responses into batches until something ends the pass.
// Until every watch has confirmed creation the seed deadline still applies.
func (w *Watcher) follow(ctx, seedCtx context.Context, updates <-chan update, lost <-chan connectivity.State) passEnd {
	opened := make([]bool, len(w.list))
	nOpen := 0
	allOpen := false
	var openedAt time.Time
	seedDone := seedCtx.Done()

	finish := func(e passEnd) passEnd {
		if allOpen {
			e.openFor = w.clk.Now().Sub(openedAt)
			w.setConnected(false)
		}
		return e
	}
	for {
		select {
		case <-ctx.Done():
			return finish(passEnd{})
		case <-seedDone:
			return finish(failed("open watches", seedCtx.Err(), false))
		case s := <-lost:
			return finish(failed("connection", safef("connection %s", s), allOpen))
		case u := <-updates:
			pw := w.list[u.idx]
			if u.closed {
				return finish(failed("watch "+pw.Key, safef("watch closed"), allOpen))
			}
			if err := u.resp.Err(); err != nil {
				return finish(failed("watch "+pw.Key, err, allOpen))
			}
			if u.resp.Created && !opened[u.idx] {
				opened[u.idx] = true
				nOpen++
				if nOpen == len(w.list) {
					allOpen = true
					openedAt = w.clk.Now()
					seedDone = nil
					w.setConnected(true)
					w.log.Info("etcd discovery watching", "prefixes", nOpen)
				}
			}
			if batch := fold(pw, &u.resp, w.clk.Now()); len(batch) > 0 {
				w.sink.Apply(batch)
			}
		}
	}
}
