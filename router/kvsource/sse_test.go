package kvsource

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestParserReadsEventsCommentsAndCRLF(t *testing.T) {
	in := ": keepalive\n\n" +
		"id: 7\nevent: kv\ndata: {\"a\":1}\n\n" +
		"id: 8\r\nevent: reset\r\ndata\r\n\r\n" +
		"retry: 100\nunknown: x\nid: 9\ndata: one\ndata: two\n\n"
	p := NewParser(strings.NewReader(in))
	want := []SSEEvent{
		{ID: 7, HasID: true, Type: "kv", Data: []byte(`{"a":1}`)},
		{ID: 8, HasID: true, Type: "reset", Data: []byte{}},
		{ID: 9, HasID: true, Data: []byte("one\ntwo")},
	}
	for i, w := range want {
		got, err := p.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got.ID != w.ID || got.HasID != w.HasID || got.Type != w.Type || !bytes.Equal(got.Data, w.Data) {
			t.Fatalf("event %d: got %+v (%q), want %+v", i, got, got.Data, w)
		}
	}
	if _, err := p.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
}

func TestParserRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		want error
	}{
		"bad id":          {"id: -1\n\n", ErrBadID},
		"id overflow":     {"id: 18446744073709551616\n\n", ErrBadID},
		"empty id":        {"id:\n\n", ErrBadID},
		"cut inside":      {"id: 1\ndata: x\n", io.ErrUnexpectedEOF},
		"cut inside line": {"id: 1\ndata: x", io.ErrUnexpectedEOF},
		"line too long":   {"data: " + strings.Repeat("x", MaxLineBytes) + "\n\n", ErrLineTooLong},
		"data too long": {strings.Repeat("data: "+strings.Repeat("x", 64<<10)+"\n", MaxEventBytes/(64<<10)+1) + "\n",
			ErrDataTooLong},
	} {
		t.Run(name, func(t *testing.T) {
			p := NewParser(strings.NewReader(tc.in))
			if _, err := p.Next(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if _, err := p.Next(); !errors.Is(err, tc.want) {
				t.Fatalf("the parser must stay failed, got %v", err)
			}
		})
	}
}

func TestAppendSSERoundTrips(t *testing.T) {
	b := AppendSSE(nil, 42, TypeKV, []byte(`{"worker_id":1}`))
	b = append(b, Keepalive...)
	b = AppendSSE(b, 43, TypeReset, []byte(`{}`))
	p := NewParser(bytes.NewReader(b))
	for _, want := range []uint64{42, 43} {
		ev, err := p.Next()
		if err != nil || ev.ID != want {
			t.Fatalf("got %+v %v, want id %d", ev, err, want)
		}
	}
}

// FuzzSSE: any input ends in events or an error, never a panic, and no
// event holds more data than the cap.
func FuzzSSE(f *testing.F) {
	f.Add([]byte("id: 1\nevent: kv\ndata: {}\n\n"))
	f.Add([]byte(": c\n\nid: 2\r\nevent: reset\r\n\r\n"))
	f.Add([]byte("data: a\ndata: b\n\nid: x\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		p := NewParser(bytes.NewReader(in))
		for range 1000 {
			ev, err := p.Next()
			if err != nil {
				return
			}
			if len(ev.Data) > MaxEventBytes {
				t.Fatalf("data of %d bytes", len(ev.Data))
			}
		}
	})
}
