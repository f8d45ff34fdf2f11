package kvsource

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"switchyard/router/clock"
	"switchyard/router/kv"
)

// pipeOpener hands out in-memory streams whose bytes the test writes: the
// exact ids and framings a follower must handle are the subject here; the
// real listener and bus carry them in router/server's end-to-end test.
type pipeOpener struct {
	mu      sync.Mutex
	changed chan struct{}
	opens   chan openReq
}

type openReq struct {
	last *uint64
	conn net.Conn // the test's end
}

func (o *pipeOpener) OpenAnnouncedStream(ctx context.Context, backend string, last *uint64) (net.Conn, error) {
	ours, theirs := net.Pipe()
	o.opens <- openReq{last: last, conn: theirs}
	return ours, nil
}
func (o *pipeOpener) Announces(string) bool { return true }
func (o *pipeOpener) Changed() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.changed
}

// recSink records what reaches the core.
type recSink struct {
	mu    sync.Mutex
	msgs  []string // "worker/event_id"
	lost  []uint64
	dec   *kv.KVEventsDecoder
	event kv.Event
}

func (s *recSink) KVMessage(ns string, pub uint64, frames [][]byte, at time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, _, r := s.dec.Decode(frames, &s.event); r != kv.DecodeOK {
		return r.String()
	}
	s.msgs = append(s.msgs, fmt.Sprintf("%s/%d/%d", ns, pub, s.event.EventID))
	return kv.Applied.String()
}

func (s *recSink) KVPublisherLost(ns string, pub uint64, at time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lost = append(s.lost, pub)
	return 1
}

func (s *recSink) snapshot() ([]string, []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.msgs...), append([]uint64(nil), s.lost...)
}

func kvLine(id, worker, eventID uint64) []byte {
	return AppendSSE(nil, id, TypeKV, fmt.Appendf(nil, `{"worker_id":%d,"event_id":%d,"kind":"cleared"}`, worker, eventID))
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFollowerResumesFromTheLastIDAndResets(t *testing.T) {
	o := &pipeOpener{changed: make(chan struct{}), opens: make(chan openReq, 4)}
	sink := &recSink{dec: kv.NewKVEventsDecoder()}
	f := NewFollower(o, sink, clock.Real{}, nil, nil, 1)
	defer f.Stop()
	f.Apply([]Source{{Backend: "vllm-1", Namespace: "dynamo"}})

	r := <-o.opens
	if r.last != nil {
		t.Fatalf("first open resumes from %d", *r.last)
	}
	var b []byte
	b = append(b, kvLine(10, 7, 1)...)
	b = append(b, Keepalive...)
	b = append(b, kvLine(11, 8, 1)...)
	b = append(b, kvLine(11, 8, 1)...) // a repeated id is dropped
	b = append(b, AppendSSE(nil, 12, "other", []byte("{}"))...)
	b = append(b, AppendSSE(nil, 13, TypeKV, []byte(`{"kind":"moved"}`))...)
	go r.conn.Write(b)
	waitFor(t, "two events", func() bool { m, _ := sink.snapshot(); return len(m) == 2 })
	met := f.Metrics()
	waitFor(t, "the refusals counted", func() bool {
		return testutil.ToFloat64(met.Events.WithLabelValues(ResultBadEvent)) == 1
	})
	if n := testutil.ToFloat64(met.Events.WithLabelValues(ResultOutOfOrder)); n != 1 {
		t.Fatalf("out_of_order %v", n)
	}
	if n := testutil.ToFloat64(met.Events.WithLabelValues(ResultUnknownType)); n != 1 {
		t.Fatalf("unknown_type %v", n)
	}

	// The stream ends: the follower reopens from the last id it saw.
	r.conn.Close()
	r = <-o.opens
	if r.last == nil || *r.last != 13 {
		t.Fatalf("resume from %v, want 13", r.last)
	}
	// A reset re-bases the ids (even below the last one) and clears the
	// workers the source reported.
	go func() {
		r.conn.Write(AppendSSE(nil, 5, TypeReset, []byte("{}")))
		r.conn.Write(kvLine(6, 7, 9))
	}()
	waitFor(t, "the event after the reset", func() bool { m, _ := sink.snapshot(); return len(m) == 3 })
	msgs, lost := sink.snapshot()
	if fmt.Sprint(msgs) != "[dynamo/7/1 dynamo/8/1 dynamo/7/9]" || fmt.Sprint(lost) != "[7 8]" {
		t.Fatalf("messages %v, lost %v", msgs, lost)
	}
	if n := testutil.ToFloat64(met.Resets.WithLabelValues(CauseReset)); n != 1 {
		t.Fatalf("resets %v", n)
	}
	if st := f.States(); len(st) != 1 || !st[0].Connected || st[0].LastEventID != 6 || st[0].Workers != 1 {
		t.Fatalf("state %+v", st)
	}

	// Removing the source clears what it reported since.
	f.Apply(nil)
	if _, lost := sink.snapshot(); fmt.Sprint(lost) != "[7 8 7]" {
		t.Fatalf("lost after removal %v", lost)
	}
	if n := testutil.ToFloat64(met.Resets.WithLabelValues(CauseRemoved)); n != 1 {
		t.Fatalf("removed %v", n)
	}
}
