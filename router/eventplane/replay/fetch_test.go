package replay

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"switchyard/internal/pypeer"
	"switchyard/router/envelope"
	"switchyard/router/eventplane"
)

// libzmq, driven through python3-zmq (internal/pypeer), stands in for
// vLLM's replay socket: an implementation independent of ours, answering
// exactly as vLLM's publisher does (testdata/vllm_replay.py).

// pyPayload mirrors payload() in testdata/vllm_replay.py.
func pyPayload(seq uint64) []byte {
	p := make([]byte, 40+seq%32)
	for i := range p {
		p[i] = byte((seq + uint64(i)) % 251)
	}
	return p
}

func startVLLM(t *testing.T, args ...string) (*pypeer.Peer, string) {
	t.Helper()
	p := pypeer.Start(t, append([]string{"testdata/vllm_replay.py"}, args...)...)
	port := p.Expect(t, "port ")
	if _, err := strconv.Atoi(port); err != nil {
		t.Fatalf("vllm_replay.py printed port %q", port)
	}
	return p, "tcp://127.0.0.1:" + port
}

func loopbackFetcher(lim Limits) *Fetcher {
	return &Fetcher{
		Dialer: &eventplane.Dialer{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
		Limits: lim,
		Counts: &Counts{},
	}
}

type delivered struct {
	seqs     []uint64
	payloads [][]byte
}

func (d *delivered) deliver(seq uint64, payload [][]byte) error {
	if len(payload) != 1 {
		return errors.New("want one payload frame, got " + strconv.Itoa(len(payload)))
	}
	d.seqs = append(d.seqs, seq)
	d.payloads = append(d.payloads, bytes.Clone(payload[0]))
	return nil
}

func (d *delivered) check(t *testing.T, from, to uint64) {
	t.Helper()
	if uint64(len(d.seqs)) != to-from+1 {
		t.Fatalf("delivered %d batches, want %d..%d", len(d.seqs), from, to)
	}
	for i, seq := range d.seqs {
		want := from + uint64(i)
		if seq != want || !bytes.Equal(d.payloads[i], pyPayload(want)) {
			t.Fatalf("batch %d: seq %d payload %x, want seq %d payload %x", i, seq, d.payloads[i], want, pyPayload(want))
		}
	}
}

func wantRefused(t *testing.T, err error, r Reason, f *Fetcher) *RefusedError {
	t.Helper()
	var re *RefusedError
	if !errors.As(err, &re) || re.Reason != r {
		t.Fatalf("want a %s refusal, got %v", r, err)
	}
	if f.Counts.Refused(r) != 1 || f.Counts.Replays.Load() != 1 {
		t.Fatalf("counts: %d %s refusals, %d replays", f.Counts.Refused(r), r, f.Counts.Replays.Load())
	}
	return re
}

func TestFetchFromVLLMReplaysToTheEndMarker(t *testing.T) {
	p, ep := startVLLM(t, "--first", "0", "--count", "50")
	f := loopbackFetcher(DefaultLimits)
	var got delivered
	res, err := f.Fetch(context.Background(), ep, 20, got.deliver)
	if err != nil {
		t.Fatal(err)
	}
	if p.Expect(t, "request ") != "20" || p.Expect(t, "sent ") != "30" {
		t.Fatal("peer saw another request")
	}
	if res != (Result{First: 20, Last: 49, Batches: 30, Ended: true}) {
		t.Fatalf("result %+v", res)
	}
	got.check(t, 20, 49)
	if f.Counts.Ended.Load() != 1 || f.Counts.Batches.Load() != 30 {
		t.Fatalf("counts: ended %d batches %d", f.Counts.Ended.Load(), f.Counts.Batches.Load())
	}
}

// The buffer has dropped what was asked for: the replay starts later,
// and the caller learns what is lost from First.
func TestFetchWhenTheBufferNoLongerHoldsFrom(t *testing.T) {
	_, ep := startVLLM(t, "--first", "0", "--count", "100", "--buffer", "10")
	f := loopbackFetcher(DefaultLimits)
	var got delivered
	res, err := f.Fetch(context.Background(), ep, 5, got.deliver)
	if err != nil {
		t.Fatal(err)
	}
	if res != (Result{First: 90, Last: 99, Batches: 10, Ended: true}) {
		t.Fatalf("result %+v", res)
	}
	got.check(t, 90, 99)
}

// Nothing at or past from: only the end marker comes.
func TestFetchPastTheBufferEndsEmpty(t *testing.T) {
	_, ep := startVLLM(t, "--count", "10")
	f := loopbackFetcher(DefaultLimits)
	res, err := f.Fetch(context.Background(), ep, 10, func(uint64, [][]byte) error {
		t.Fatal("nothing to deliver")
		return nil
	})
	if err != nil || res != (Result{Ended: true}) {
		t.Fatalf("result %+v, %v", res, err)
	}
}

func TestFetchStopsWhenDeliverSaysSo(t *testing.T) {
	_, ep := startVLLM(t, "--count", "100")
	f := loopbackFetcher(DefaultLimits)
	var got delivered
	res, err := f.Fetch(context.Background(), ep, 10, func(seq uint64, p [][]byte) error {
		if err := got.deliver(seq, p); err != nil {
			return err
		}
		if seq == 14 {
			return Stop
		}
		return nil
	})
	if err != nil || res != (Result{First: 10, Last: 14, Batches: 5}) {
		t.Fatalf("result %+v, %v", res, err)
	}
	got.check(t, 10, 14)
	if f.Counts.Stopped.Load() != 1 {
		t.Fatal("a stopped replay was not counted")
	}
}

func TestFetchRefusesMalformedReplies(t *testing.T) {
	cases := []struct {
		mode   string
		reason Reason
		detail string
		want   int // batches delivered before the refusal
	}{
		{"short", ReasonMalformed, "reply of 2 frames", 0},
		{"seqlen", ReasonMalformed, "sequence frame is 4 bytes", 0},
		{"delimiter", ReasonMalformed, "not the empty delimiter", 0},
		{"repeat", ReasonOutOfOrder, "does not follow 3", 1},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			_, ep := startVLLM(t, "--mode", c.mode, "--count", "10")
			f := loopbackFetcher(DefaultLimits)
			var got delivered
			res, err := f.Fetch(context.Background(), ep, 3, got.deliver)
			re := wantRefused(t, err, c.reason, f)
			if !bytes.Contains([]byte(re.Detail), []byte(c.detail)) {
				t.Fatalf("detail %q does not say %q", re.Detail, c.detail)
			}
			if res.Batches != c.want || len(got.seqs) != c.want || res.Ended {
				t.Fatalf("result %+v after %d deliveries", res, len(got.seqs))
			}
		})
	}
}

func TestFetchRefusesAnOversizedPayload(t *testing.T) {
	lim := envelope.KVEventLimits
	_, ep := startVLLM(t, "--mode", "oversized", "--count", "5", "--payload-bytes", strconv.Itoa(lim.MaxFrameBytes+1))
	f := loopbackFetcher(DefaultLimits)
	var got delivered
	res, err := f.Fetch(context.Background(), ep, 0, got.deliver)
	re := wantRefused(t, err, ReasonProtocol, f)
	if !bytes.Contains([]byte(re.Detail), []byte("exceeds")) || res.Batches != 1 {
		t.Fatalf("%v after %+v", re, res)
	}
	got.check(t, 0, 0)
}

func TestFetchCapsBatches(t *testing.T) {
	_, ep := startVLLM(t, "--count", "30")
	f := loopbackFetcher(Limits{MaxBatches: 10})
	var got delivered
	res, err := f.Fetch(context.Background(), ep, 0, got.deliver)
	wantRefused(t, err, ReasonTooMany, f)
	if res.Batches != 10 || res.Ended {
		t.Fatalf("result %+v", res)
	}
	got.check(t, 0, 9)
}

func TestFetchTimesOutOnASilentPublisher(t *testing.T) {
	p, ep := startVLLM(t, "--mode", "silent")
	// Generous for a busy machine: the bound is what is tested, not speed.
	f := loopbackFetcher(Limits{Timeout: 3 * time.Second})
	res, err := f.Fetch(context.Background(), ep, 0, func(uint64, [][]byte) error { return nil })
	p.Expect(t, "request ")
	wantRefused(t, err, ReasonTimeout, f)
	if res != (Result{}) {
		t.Fatalf("result %+v", res)
	}
}

// A publisher that goes away before the end marker: what came stands,
// and the replay is a failure, not a refusal.
func TestFetchWithoutTheEndMarker(t *testing.T) {
	_, ep := startVLLM(t, "--mode", "noend", "--count", "5")
	f := loopbackFetcher(DefaultLimits)
	var got delivered
	res, err := f.Fetch(context.Background(), ep, 0, got.deliver)
	var re *RefusedError
	if err == nil || errors.As(err, &re) || res.Ended || res.Batches != 5 {
		t.Fatalf("result %+v, %v", res, err)
	}
	got.check(t, 0, 4)
	if f.Counts.Failed.Load() != 1 {
		t.Fatal("not counted as failed")
	}
}

func TestFetchFollowsTheDialPolicy(t *testing.T) {
	_, ep := startVLLM(t, "--count", "3")
	f := loopbackFetcher(DefaultLimits)
	f.Dialer = &eventplane.Dialer{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	_, err := f.Fetch(context.Background(), ep, 0, func(uint64, [][]byte) error { return nil })
	if !errors.Is(err, eventplane.ErrNotAllowed) {
		t.Fatalf("dialed outside the allow list: %v", err)
	}
	for _, bad := range []string{"ipc:///tmp/x", "tcp://127.0.0.1", "tcp://127.0.0.1:0", "tcp://:5558"} {
		f := loopbackFetcher(DefaultLimits)
		_, err := f.Fetch(context.Background(), bad, 0, nil)
		wantRefused(t, err, ReasonEndpoint, f)
	}
}

func TestFetchHonoursCancel(t *testing.T) {
	p, ep := startVLLM(t, "--mode", "silent")
	f := loopbackFetcher(DefaultLimits)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := f.Fetch(ctx, ep, 0, nil)
		done <- err
	}()
	p.Expect(t, "request ")
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled replay returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled replay did not return")
	}
}
