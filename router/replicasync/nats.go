package replicasync

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"switchyard/router/replica"
)

// Bounds of the NATS link.
const (
	// natsPendingMsgs and natsPendingBytes bound the batches received and
	// not yet handed to the core; beyond them the client drops batches
	// (a slow consumer) and they are counted, the connection never blocks.
	natsPendingMsgs  = 1024
	natsPendingBytes = 16 << 20
	// natsReconnectBuf bounds what is published while the server is
	// unreachable; beyond it batches are dropped and counted.
	natsReconnectBuf = 1 << 20
	// natsFlushTimeout bounds a write to a server that does not read.
	natsFlushTimeout = time.Second
	// natsReconnectWait is the pause between reconnection attempts (plus
	// the client's jitter).
	natsReconnectWait = 250 * time.Millisecond
)

// CheckSubject reports whether subject is a valid NATS subject to publish
// on: dot-separated non-empty tokens, no wildcards, no whitespace. A
// namespace with one of those would make its replicas' subject unusable.
func CheckSubject(subject string) error {
	if len(subject) > 4096 {
		return fmt.Errorf("NATS subject %q is too long", subject[:64]+"…")
	}
	for tok := range strings.SplitSeq(subject, ".") {
		if tok == "" {
			return fmt.Errorf("NATS subject %q has an empty token (a leading, trailing or doubled dot)", subject)
		}
		if tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\f\v\x00") {
			return fmt.Errorf("NATS subject %q holds a wildcard or whitespace", subject)
		}
	}
	return nil
}

// natsLink is a replica's NATS connection: it publishes the replica's
// batches on its subject and subscribes to the same subject for its
// peers'. The server does not echo the replica's own messages (NoEcho),
// and receive skips any carrying its id.
type natsLink struct {
	s  *Sync
	nc *nats.Conn

	mu      sync.Mutex
	sub     *nats.Subscription
	dropped int // sub.Dropped() already counted
}

func dialNATS(s *Sync) (*natsLink, error) {
	l := &natsLink{s: s}
	m, log := s.m, s.log
	nc, err := nats.Connect(s.opts.NATSURL,
		nats.Name(fmt.Sprintf("switchyard-replica-%016x", s.id)),
		nats.NoEcho(),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(natsReconnectWait),
		nats.ReconnectBufSize(natsReconnectBuf),
		nats.FlusherTimeout(natsFlushTimeout),
		nats.ConnectHandler(func(*nats.Conn) { m.NATSConnected.Set(1) }),
		nats.ReconnectHandler(func(*nats.Conn) {
			m.NATSConnected.Set(1)
			m.NATSReconnects.Inc()
			log.Info("replica sync: NATS reconnected")
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			m.NATSConnected.Set(0)
			log.Warn("replica sync: NATS disconnected", "err", err)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				l.countSlow()
				return
			}
			log.Warn("replica sync: NATS error", "err", err)
		}),
	)
	if err != nil {
		// The URL is not logged: it may carry credentials.
		return nil, fmt.Errorf("replica sync: NATS: %w", err)
	}
	if nc.IsConnected() {
		m.NATSConnected.Set(1)
	}
	l.nc = nc
	return l, nil
}

// subscribe follows the peers' batches on the subject. The client
// resubscribes by itself after a reconnection.
func (l *natsLink) subscribe(target Target) error {
	var b replica.Batch // the callbacks of one subscription run one at a time
	sub, err := l.nc.Subscribe(l.s.Topic(), func(msg *nats.Msg) {
		l.s.receive(msg.Data, &b, target)
	})
	if err != nil {
		return err
	}
	pending := natsPendingMsgs
	if l.s.opts.natsPendingMsgs > 0 {
		pending = l.s.opts.natsPendingMsgs
	}
	if err := sub.SetPendingLimits(pending, natsPendingBytes); err != nil {
		return err
	}
	l.mu.Lock()
	l.sub = sub
	l.mu.Unlock()
	// A round trip, so the server holds the subscription when Start
	// returns (when connected; otherwise it is sent on connection).
	if l.nc.IsConnected() {
		_ = l.nc.FlushTimeout(5 * time.Second)
	}
	return nil
}

// publish sends one encoded batch; it never waits for the server beyond
// the flush timeout. A batch the client refuses (too large for the
// server, the reconnect buffer full, the link closed) is counted.
func (l *natsLink) publish(p []byte) {
	l.countSlow()
	err := l.nc.Publish(l.s.Topic(), p)
	switch {
	case err == nil:
	case errors.Is(err, nats.ErrMaxPayload):
		l.s.m.Dropped.WithLabelValues("too_large").Inc()
	default:
		l.s.m.Dropped.WithLabelValues("publish_failed").Inc()
		l.s.log.Debug("replica sync: NATS publish failed", "err", err)
	}
}

// countSlow adds the batches the client dropped for a slow consumer since
// the last count.
func (l *natsLink) countSlow() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sub == nil {
		return
	}
	n, err := l.sub.Dropped()
	if err != nil || n <= l.dropped {
		return
	}
	l.s.m.Dropped.WithLabelValues("slow_consumer").Add(float64(n - l.dropped))
	l.dropped = n
}

func (l *natsLink) close() {
	l.countSlow()
	l.nc.Close()
	l.s.m.NATSConnected.Set(0)
}
