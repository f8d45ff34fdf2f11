package envelope

import (
	"testing"
	"time"

	"switchyard/fakefleet/wire"
)

func TestDecodeDynamoShapedMessage(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	frames := wire.LoadMessage(42, 7, wire.ActiveLoad{WorkerID: 1, KVUsedBlocks: wire.U64(3)}, at)
	d := NewDecoder("kv_metrics", 16<<10)
	var m Message
	if r := d.Decode(frames, &m); r != Applied {
		t.Fatalf("result %v", r)
	}
	if m.PublisherID != 42 || m.Sequence != 7 || m.Envelope.PublishedAt != 1_700_000_000_123 || string(m.Envelope.Topic) != "kv_metrics" {
		t.Fatalf("%+v", m)
	}
	if len(m.Envelope.Payload) == 0 {
		t.Fatal("empty payload")
	}
	// Extra bytes after the declared payload are ignored.
	frames[3] = append(frames[3], 0xff, 0xff)
	if r := d.Decode(frames, &m); r != Applied {
		t.Fatalf("trailing bytes: %v", r)
	}
	// A payload written as an array of integers (older encoders).
	type arrEnv struct {
		Topic       string `msgpack:"topic"`
		PublisherID uint64 `msgpack:"publisher_id"`
		Sequence    uint64 `msgpack:"sequence"`
		PublishedAt uint64 `msgpack:"published_at"`
		Payload     []int  `msgpack:"payload"`
	}
	frames = wire.LoadMessage(42, 8, wire.ActiveLoad{}, at)
	frames[3] = wire.Frame(wire.Marshal(&arrEnv{"kv_metrics", 42, 8, 0, []int{0x81, 0xa1, 'x', 0x01}}, false))
	if r := d.Decode(frames, &m); r != Applied || string(m.Envelope.Payload) != "\x81\xa1x\x01" {
		t.Fatalf("array payload: %v %x", r, m.Envelope.Payload)
	}
}

func TestResultNamesAreClosed(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Results() {
		if seen[r.String()] {
			t.Fatalf("duplicate name %s", r)
		}
		seen[r.String()] = true
	}
	if Result(200).String() != "malformed" {
		t.Fatal("an out-of-range result must not invent a label")
	}
}

func FuzzDecode(f *testing.F) {
	at := time.UnixMilli(0)
	good := wire.LoadMessage(1, 1, wire.ActiveLoad{WorkerID: 1}, at)
	f.Add(good[0], good[1], good[2], good[3])
	f.Add([]byte("kv_metrics"), []byte{0, 0, 0, 0, 0, 0, 0, 1}, []byte{0, 0, 0, 0, 0, 0, 0, 1}, []byte{1, 0xff, 0xff, 0xff, 0xff})
	d := NewDecoder("kv_metrics", 16<<10)
	f.Fuzz(func(t *testing.T, a, b, c, e []byte) {
		var m Message
		r := d.Decode([][]byte{a, b, c, e}, &m)
		if r == Applied && len(m.Envelope.Payload) > d.MaxPayload {
			t.Fatal("payload over the ceiling accepted")
		}
	})
}
