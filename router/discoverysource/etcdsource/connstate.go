package etcdsource

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// watchConnection calls lost, once, with the state in which conn stopped
// being usable. clientv3 hides a dropped connection: RPCs wait for a
// reconnect and watches resume on their own, so without this a pass would
// neither show as disconnected nor resync, and a seed against an
// unreachable member would sit out the whole seed timeout. A connection
// counts as lost when the channel
//   - reaches TransientFailure (every endpoint failed) or Shutdown, or
//   - leaves Ready for any state once it has been Ready: gRPC moves a
//     channel whose last connection broke to Connecting or Idle first and
//     to TransientFailure only after a redial fails.
//
// With several endpoints the channel stays Ready while any one connection
// is, so losing one member does not end the pass. The goroutine exits when
// ctx ends; wg lets the pass wait for it.
func watchConnection(ctx context.Context, conn *grpc.ClientConn, wg *sync.WaitGroup, lost func(connectivity.State)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		wasReady := false
		for {
			s := conn.GetState()
			switch {
			case s == connectivity.Ready:
				wasReady = true
			case s == connectivity.TransientFailure, s == connectivity.Shutdown, wasReady:
				lost(s)
				return
			}
			if !conn.WaitForStateChange(ctx, s) {
				return
			}
		}
	}()
}
