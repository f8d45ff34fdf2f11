package replay

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"switchyard/fakefleet/engine"
	"switchyard/fakefleet/publish"
)

type ended struct {
	req Request
	res Result
	err error
}

// host records what a Replayer hands it, as a host's input path would.
type host struct {
	mu   sync.Mutex
	msgs map[uint64][][][]byte // by publisher id
	ends chan ended
}

func newHost() *host {
	return &host{msgs: map[uint64][][][]byte{}, ends: make(chan ended, 16)}
}

func (h *host) replayer(max int) *Replayer {
	return &Replayer{Fetcher: loopbackFetcher(DefaultLimits), Max: max,
		Deliver: func(req Request, frames [][]byte) {
			h.mu.Lock()
			h.msgs[req.PublisherID] = append(h.msgs[req.PublisherID], frames)
			h.mu.Unlock()
		},
		End: func(req Request, res Result, err error) { h.ends <- ended{req, res, err} },
	}
}

func (h *host) delivered(id uint64) [][][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.msgs[id]
}

func (h *host) end(t *testing.T) ended {
	t.Helper()
	select {
	case e := <-h.ends:
		return e
	case <-time.After(30 * time.Second):
		t.Fatal("no replay ended within 30 s")
	}
	return ended{}
}

// A vLLM replay from a libzmq ROUTER comes back in the live form, up to
// the last sequence wanted.
func TestReplayerVLLMUpToTo(t *testing.T) {
	_, ep := startVLLM(t, "--first", "0", "--count", "50")
	h := newHost()
	r := h.replayer(0)
	defer r.Close()
	topic := []byte("kv@10.0.0.7@m")
	if err := r.Start(Request{Namespace: "ns", PublisherID: 1, Endpoint: ep, Family: VLLM, Topic: topic, From: 10, To: 19}); err != nil {
		t.Fatal(err)
	}
	e := h.end(t)
	if e.err != nil || e.res != (Result{First: 10, Last: 19, Batches: 10}) {
		t.Fatalf("ended %+v, %v", e.res, e.err)
	}
	msgs := h.delivered(1)
	if len(msgs) != 10 {
		t.Fatalf("%d messages", len(msgs))
	}
	for i, m := range msgs {
		seq := uint64(10 + i)
		if len(m) != 3 || !bytes.Equal(m[0], topic) || binary.BigEndian.Uint64(m[1]) != seq || !bytes.Equal(m[2], pyPayload(seq)) {
			t.Fatalf("message %d: %q", i, m)
		}
	}
	if r.Running() != 0 {
		t.Fatal("a finished replay still counts as running")
	}
}

// A reply past To is not delivered: the caller has it from the live
// stream already. Here the buffer skips from 4 to 9 (To = 6).
func TestReplayerDoesNotDeliverPastTo(t *testing.T) {
	_, ep := startVLLM(t, "--first", "9", "--count", "5")
	h := newHost()
	r := h.replayer(0)
	defer r.Close()
	if err := r.Start(Request{PublisherID: 2, Endpoint: ep, Family: VLLM, From: 4, To: 6}); err != nil {
		t.Fatal(err)
	}
	e := h.end(t)
	if e.err != nil || e.res.Batches != 0 || len(h.delivered(2)) != 0 {
		t.Fatalf("ended %+v, %v with %d messages", e.res, e.err, len(h.delivered(2)))
	}
}

// One replay per subscription, Max overall; Cancel and Close end them
// with context.Canceled, and a closed Replayer refuses more.
func TestReplayerBounds(t *testing.T) {
	pa, silentA := startVLLM(t, "--mode", "silent")
	pb, silentB := startVLLM(t, "--mode", "silent")
	h := newHost()
	r := h.replayer(2)
	a := Request{Namespace: "ns", PublisherID: 1, Endpoint: silentA, Family: VLLM}
	b := Request{Namespace: "ns", PublisherID: 2, Endpoint: silentB, Family: VLLM}
	if err := r.Start(a); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(a); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second replay of one subscription: %v", err)
	}
	if err := r.Start(b); err != nil {
		t.Fatal(err)
	}
	c := Request{Namespace: "other", PublisherID: 1, Endpoint: silentA, Family: VLLM}
	if err := r.Start(c); !errors.Is(err, ErrSaturated) {
		t.Fatalf("a third replay with Max 2: %v", err)
	}
	pa.Expect(t, "request ")
	pb.Expect(t, "request ")
	r.Cancel("ns", 1)
	if e := h.end(t); e.req.PublisherID != 1 || !errors.Is(e.err, context.Canceled) {
		t.Fatalf("cancelled replay ended %+v", e)
	}
	r.Close()
	if e := h.end(t); e.req.PublisherID != 2 || !errors.Is(e.err, context.Canceled) {
		t.Fatalf("closed replay ended %+v", e)
	}
	if err := r.Start(a); !errors.Is(err, ErrClosed) {
		t.Fatalf("start after close: %v", err)
	}
}

// The fake fleet's kv-events publisher loses messages on the way; a
// Dynamo-family replay brings them back byte for byte, and stops where
// the live stream resumed.
func TestReplayerDynamoFromTheFakeFleet(t *testing.T) {
	p, err := publish.New(publish.KVEventsTopic)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.ServeReplay(0); err != nil {
		t.Fatal(err)
	}
	rep, err := publish.NewKVReporter(p, 5)
	if err != nil {
		t.Fatal(err)
	}
	p.DropNext(6) // nobody subscribes: every message is kept, none sent
	for id := uint64(1); id <= 6; id++ {
		if err := rep.Report(0, []engine.KVEvent{{EventID: id, Kind: engine.Removed, Removed: []uint64{id}}}); err != nil {
			t.Fatal(err)
		}
	}
	h := newHost()
	r := h.replayer(0)
	defer r.Close()
	if err := r.Start(Request{PublisherID: p.ID(), Endpoint: p.ReplayEndpoint(), Family: Dynamo, From: 2, To: 4}); err != nil {
		t.Fatal(err)
	}
	if e := h.end(t); e.err != nil || e.res != (Result{First: 2, Last: 4, Batches: 3}) {
		t.Fatalf("ended %+v, %v", e.res, e.err)
	}
	for i, m := range h.delivered(p.ID()) {
		if len(m) != 4 || string(m[0]) != "kv-events" || binary.BigEndian.Uint64(m[1]) != p.ID() || binary.BigEndian.Uint64(m[2]) != uint64(2+i) {
			t.Fatalf("message %d: %q", i, m)
		}
	}

	// Asked as vLLM, the four-frame replies do not fit: refused, counted.
	if err := r.Start(Request{PublisherID: p.ID(), Endpoint: p.ReplayEndpoint(), Family: VLLM, From: 1}); err != nil {
		t.Fatal(err)
	}
	e := h.end(t)
	var re *RefusedError
	if !errors.As(e.err, &re) || re.Reason != ReasonMalformed || r.Fetcher.Counts.Refused(ReasonMalformed) != 1 {
		t.Fatalf("ended %+v, %v", e.res, e.err)
	}
}
