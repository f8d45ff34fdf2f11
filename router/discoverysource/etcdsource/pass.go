package etcdsource

import (
	"context"
	"errors"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// dialTimeout bounds clientv3.New, which runs the Authenticate RPC when
// credentials are set. It is shorter than the seed timeout so an
// unreachable member with auth configured fails the pass well within it.
const dialTimeout = 10 * time.Second

// pass runs one get-then-watch cycle and reports why it ended; dials
// makes its connections and keeps their errors. Every goroutine it starts
// has exited when it returns.
func (w *Watcher) pass(ctx context.Context, dials *dialErrors) passEnd {
	w.mu.Lock()
	w.status.Passes++
	w.mu.Unlock()

	var wg sync.WaitGroup
	defer wg.Wait()
	passCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	cli, err := w.dial(passCtx, dials)
	if err != nil {
		return failed("connect", err, false)
	}
	// Cancelling releases forwarders blocked on the merged channel; closing
	// the client then closes every watch channel and the connection, so the
	// forwarders and the connection monitor have ended before wg.Wait.
	defer func() {
		cancel()
		_ = cli.Close()
	}()

	// connCtx ends, with the state as its cause, when the connection is
	// lost; the seed and the wait for watch creation run under it.
	connCtx, dropConn := context.WithCancelCause(passCtx)
	defer dropConn(nil)
	watchConnection(passCtx, cli.ActiveConnection(), &wg, func(s connectivity.State) {
		dropConn(safef("connection %s", s))
	})
	seedCtx, seedCancel := context.WithTimeout(connCtx, seedTimeout)
	defer seedCancel()

	snap, err := takeSnapshot(seedCtx, cli, w.list)
	if err != nil {
		return failed("range get", cause(seedCtx, err), false)
	}
	w.deliverSnapshot(snap)
	if w.beforeWatch != nil {
		w.beforeWatch()
	}
	updates := openWatches(passCtx, cli, w.list, snap.revision+1, &wg)
	return w.follow(passCtx, connCtx, seedCtx, updates)
}

// cause prefers the recorded reason a context was cut (a lost connection)
// over the bare context error an RPC returned because of it.
func cause(ctx context.Context, err error) error {
	c := context.Cause(ctx)
	if c == nil || errors.Is(c, context.Canceled) {
		return err
	}
	return c
}

// dial makes the pass's client, connecting through dials.
func (w *Watcher) dial(ctx context.Context, dials *dialErrors) (*clientv3.Client, error) {
	tc, err := w.cfg.tlsConfig()
	if err != nil {
		return nil, safef("tls: %v", err)
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   w.cfg.Endpoints,
		DialTimeout: dialTimeout,
		// Keepalive pings notice a peer that vanished without closing the
		// connection, so the connection monitor sees it leave Ready.
		// etcd refuses pings more often than every 5 s.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		TLS:                  tc,
		MaxCallRecvMsgSize:   maxResponseBytes,
		Username:             w.cfg.Username,
		Password:             w.cfg.Password,
		Context:              ctx,
		// clientv3's own retry chatter would duplicate the pass-level log.
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(dials.dial)},
	})
}

// follow folds watch responses into batches until something ends the pass.
// Until every watch has confirmed creation the seed deadline still applies.
func (w *Watcher) follow(ctx, connCtx, seedCtx context.Context, updates <-chan update) passEnd {
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
		case <-connCtx.Done():
			if ctx.Err() != nil {
				return finish(passEnd{}) // the host stopped Run
			}
			return finish(failed("connection", context.Cause(connCtx), allOpen))
		case <-seedDone:
			return finish(failed("open watches", cause(seedCtx, seedCtx.Err()), false))
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
