package replica

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"switchyard/router/active"
)

func sample() Batch {
	return Batch{Replica: 0xfeedbeef, Seq: 7, Events: []Event{
		{Kind: Added, RequestID: 1 << 62, Holds: []active.Hold{
			{Rank: active.Rank{Namespace: "dynamo", WorkerID: 42, DPRank: 3}, PrefillTokens: 900, Blocks: 15, OutputTokens: 128, BlockSize: 16},
			{Rank: active.Rank{Namespace: "dynamo", WorkerID: 7}, PrefillTokens: 900, Blocks: 15, UntilFirstToken: true},
		}},
		{Kind: FirstToken, RequestID: 1 << 62},
		{Kind: Progress, RequestID: 1 << 62, OutputTokens: 64},
		{Kind: Ended, RequestID: 1 << 62},
	}}
}

func TestRoundTrip(t *testing.T) {
	in := sample()
	p, err := Append(nil, &in)
	if err != nil {
		t.Fatal(err)
	}
	var out Batch
	if err := Decode(p, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
	rep, seq, err := Header(p)
	if err != nil || rep != in.Replica || seq != in.Seq {
		t.Fatalf("Header = %d, %d, %v", rep, seq, err)
	}
	// A heartbeat is a batch without events.
	hb := Batch{Replica: 1, Seq: 2}
	p, _ = Append(nil, &hb)
	if err := Decode(p, &out); err != nil || len(out.Events) != 0 || out.Seq != 2 {
		t.Fatalf("heartbeat: %+v, %v", out, err)
	}
}

func reason(err error) string {
	var de *DecodeError
	if errors.As(err, &de) {
		return de.Reason
	}
	return ""
}

func TestRefusals(t *testing.T) {
	good := sample()
	valid, _ := Append(nil, &good)
	hdr := func(n uint64, rest ...byte) []byte {
		p := append([]byte(nil), valid[:headerSize]...)
		p = binary.AppendUvarint(p, n)
		return append(p, rest...)
	}
	long := hdr(1, byte(Added), 1, 1)
	long = binary.AppendUvarint(long, MaxNamespace+1)
	long = append(long, bytes.Repeat([]byte{'a'}, MaxNamespace+1)...)
	cases := []struct {
		name string
		p    []byte
		want string
	}{
		{"empty", nil, "short"},
		{"magic", append([]byte("NOPE"), valid[4:]...), "magic"},
		{"version", append(append([]byte(nil), valid[:4]...), append([]byte{9}, valid[5:]...)...), "version"},
		{"too many events", hdr(MaxEvents + 1), "too_many_events"},
		{"count beyond the bytes", hdr(200, 4, 1), "truncated"},
		{"unknown kind", hdr(1, 9, 1), "bad_kind"},
		{"no holds", hdr(1, byte(Added), 1, 0), "bad_holds"},
		{"three holds", hdr(1, byte(Added), 1, 3, 0, 0, 0, 0, 0, 0, 0, 0), "bad_holds"},
		{"long namespace", long, "long_namespace"},
		{"varint overflow", hdr(1, byte(Ended), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), "overflow"},
		{"trailing", append(append([]byte(nil), valid...), 0), "trailing"},
		{"truncated", valid[:len(valid)-3], "truncated"},
		{"too large", make([]byte, MaxBatchBytes+1), "too_large"},
	}
	for _, c := range cases {
		var b Batch
		if got := reason(Decode(c.p, &b)); got != c.want {
			t.Errorf("%s: reason %q, want %q", c.name, got, c.want)
		}
	}
}

func TestAppendRefusesWhatDecodeRefuses(t *testing.T) {
	b := Batch{Events: make([]Event, MaxEvents+1)}
	if _, err := Append(nil, &b); err == nil {
		t.Error("257 events encoded")
	}
	b = Batch{Events: []Event{{Kind: Added, RequestID: 1}}}
	if _, err := Append(nil, &b); err == nil {
		t.Error("an added request without holds encoded")
	}
	// A full batch of the largest events stays within MaxBatchBytes.
	h := active.Hold{Rank: active.Rank{Namespace: string(bytes.Repeat([]byte{'n'}, MaxNamespace)), WorkerID: ^uint64(0), DPRank: ^uint32(0)},
		PrefillTokens: ^uint64(0), Blocks: ^uint64(0), OutputTokens: ^uint64(0), BlockSize: ^uint64(0), UntilFirstToken: true}
	b = Batch{Replica: ^uint64(0), Seq: ^uint64(0)}
	for i := 0; i < MaxEvents; i++ {
		b.Events = append(b.Events, Event{Kind: Added, RequestID: ^uint64(0), Holds: []active.Hold{h, h}})
	}
	p, err := Append(nil, &b)
	if err != nil {
		t.Fatal(err)
	}
	var out Batch
	if err := Decode(p, &out); err != nil || len(out.Events) != MaxEvents {
		t.Fatalf("largest batch (%d bytes): %v", len(p), err)
	}
}

func FuzzBatchDecode(f *testing.F) {
	s := sample()
	p, _ := Append(nil, &s)
	f.Add(p)
	hb := Batch{Replica: 3, Seq: 1}
	p, _ = Append(nil, &hb)
	f.Add(p)
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Batch
		err := Decode(data, &b)
		if err != nil {
			if reason(err) == "" {
				t.Fatalf("refusal without a reason: %v", err)
			}
			return
		}
		if len(b.Events) > MaxEvents {
			t.Fatalf("%d events decoded", len(b.Events))
		}
		// What decodes re-encodes to the same bytes' meaning.
		again, err := Append(nil, &b)
		if err != nil {
			t.Fatalf("decoded batch does not encode: %v", err)
		}
		var b2 Batch
		if err := Decode(again, &b2); err != nil || !reflect.DeepEqual(b, b2) {
			t.Fatalf("re-encoding changed the batch: %v", err)
		}
	})
}
