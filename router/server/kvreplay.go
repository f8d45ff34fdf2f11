package server

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"switchyard/router/core"
	"switchyard/router/eventplane"
	"switchyard/router/eventplane/replay"
	"switchyard/router/events"
)

// kvReplays answers the core's requests for missed kv-events
// (core.Hooks.KVReplayWanted): it asks the publisher's replay socket, the
// endpoint its subscription target carries, and feeds what comes back into
// the core as replayed messages, then the replay's end. The core decides
// what a replay is for and what happens when it fails; this is only the
// transport.
type kvReplays struct {
	core *core.Shared
	subs *eventplane.Supervisor
	// family is how the subscriptions' live messages look: vLLM's own
	// three frames in standalone mode, Dynamo's four otherwise.
	family   replay.Family
	replayer *replay.Replayer
	// dialer is the subscriptions' dial policy, swapped on a reload.
	dialer atomic.Pointer[eventplane.Dialer]
}

func newKVReplays(c *core.Shared, subs *eventplane.Supervisor, fam replay.Family, d *eventplane.Dialer, counts *replay.Counts) *kvReplays {
	k := &kvReplays{core: c, subs: subs, family: fam}
	k.dialer.Store(d)
	k.replayer = &replay.Replayer{
		Fetcher: &replay.Fetcher{Dialer: policyDialer{k}, Counts: counts},
		Deliver: func(req replay.Request, frames [][]byte) {
			c.KVReplayed(req.Namespace, req.PublisherID, frames, time.Now())
		},
		End: func(req replay.Request, _ replay.Result, err error) {
			c.KVReplayEnd(req.Namespace, req.PublisherID, errText(err), time.Now())
		},
	}
	return k
}

// wanted is the core's hook. It runs inside the core's serialized input,
// while the subscription supervisor may be waiting to give the core an
// input of its own, so it answers from a goroutine of its own.
func (k *kvReplays) wanted(w events.KVReplayWanted) {
	go k.start(w)
}

func (k *kvReplays) start(w events.KVReplayWanted) {
	t, ok := k.subs.Target(w.Namespace, w.PublisherID)
	if !ok || t.ReplayEndpoint == "" {
		k.core.KVReplayEnd(w.Namespace, w.PublisherID, "the publisher offers no replay", time.Now())
		return
	}
	// A replayed vLLM batch carries no topic: vLLM names its topic freely
	// and the decoder reads only the sequence and the payload.
	err := k.replayer.Start(replay.Request{Namespace: w.Namespace, PublisherID: w.PublisherID,
		Endpoint: t.ReplayEndpoint, Family: k.family, From: w.From, To: w.To})
	if err != nil { // End is not called for a request Start refused
		k.core.KVReplayEnd(w.Namespace, w.PublisherID, err.Error(), time.Now())
	}
}

// setDialer applies a new dial policy to the replays started after it.
func (k *kvReplays) setDialer(d *eventplane.Dialer) { k.dialer.Store(d) }

// close cancels the replays running and waits for them.
func (k *kvReplays) close() { k.replayer.Close() }

func errText(err error) string {
	if err == nil {
		return ""
	}
	if errors.Is(err, context.Canceled) {
		return "cancelled"
	}
	return err.Error()
}

// policyDialer dials under the dial policy current when a replay starts.
type policyDialer struct{ k *kvReplays }

func (p policyDialer) Dial(ctx context.Context, hostPort string) (net.Conn, error) {
	return p.k.dialer.Load().Dial(ctx, hostPort)
}
