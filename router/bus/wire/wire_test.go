package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestDecodeHelloAndHeartbeat(t *testing.T) {
	in := `{"type":"hello","role":"broker","client_id":"broker-a","versions":[1],"dynamo_namespaces":["dynamo"]}` + "\n\n" +
		`{"type":"heartbeat","seq":7}` + "\n"
	d := NewDecoder(strings.NewReader(in))
	m, err := d.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != TypeHello || m.ClientID != "broker-a" || len(m.DynamoNamespaces) != 1 || m.DynamoNamespaces[0] != "dynamo" {
		t.Fatalf("hello decoded as %+v", m)
	}
	m, err = d.Decode()
	if err != nil || m.Type != TypeHeartbeat || m.Seq != 7 {
		t.Fatalf("heartbeat: %+v %v", m, err)
	}
	if _, err := d.Decode(); !errors.Is(err, io.EOF) {
		t.Fatalf("want EOF, got %v", err)
	}
}

func TestDecodeRefusals(t *testing.T) {
	cases := map[string]string{
		"unknown type":      `{"type":"launch"}`,
		"no type":           `{}`,
		"bad role":          `{"type":"hello","role":"admin","client_id":"a","versions":[1]}`,
		"no versions":       `{"type":"hello","role":"broker","client_id":"a"}`,
		"space in ns":       `{"type":"hello","role":"broker","client_id":"a","versions":[1],"dynamo_namespaces":["a b"]}`,
		"subscribe no port": `{"type":"subscribe","stream_id":"s1","target":{"namespace":"n","host":"h"}}`,
		"bad stream id":     `{"type":"unsubscribe","stream_id":"../x"}`,
		"not json":          `{"type":`,
		"error no code":     `{"type":"error"}`,
	}
	for name, line := range cases {
		_, err := NewDecoder(strings.NewReader(line + "\n")).Decode()
		if !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: want ErrBadMessage, got %v", name, err)
		}
	}
}

func TestDecodeLineCap(t *testing.T) {
	long := `{"type":"heartbeat","reason":"` + strings.Repeat("x", MaxLineBytes) + `"}` + "\n"
	if _, err := NewDecoder(strings.NewReader(long)).Decode(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("want ErrLineTooLong, got %v", err)
	}
	// A line exactly at the cap is read.
	pad := MaxLineBytes - len(`{"type":"heartbeat","code":"x","seq":1}`)
	exact := `{"type":"heartbeat","code":"x","seq":1}` + strings.Repeat(" ", pad) + "\n"
	if m, err := NewDecoder(strings.NewReader(exact)).Decode(); err != nil || m.Seq != 1 {
		t.Fatalf("line at the cap: %+v %v", m, err)
	}
	if _, err := NewDecoder(strings.NewReader(`{"type":"heartbeat"}`)).Decode(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut line: want ErrUnexpectedEOF, got %v", err)
	}
}

func TestAppendRoundTrip(t *testing.T) {
	m := Message{Type: TypeSubscribe, StreamID: "st-1", Target: &Target{Namespace: "dynamo", Host: "10.0.0.7", Port: 5557, Topic: "kv"}}
	b, err := Append(nil, &m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(b, []byte("\n")) {
		t.Fatalf("no newline: %q", b)
	}
	got, err := NewDecoder(bytes.NewReader(b)).Decode()
	if err != nil || got.Target.Port != 5557 || got.StreamID != "st-1" {
		t.Fatalf("round trip: %+v %v", got, err)
	}
}

// FuzzDecode: any input either decodes to messages that validate and
// re-encode, or fails with a decoder error; never a panic, never a line
// past the cap.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"type":"hello","role":"kv_listener","client_id":"kv-a","versions":[1],"sources":[{"backend":"vllm-1"}]}` + "\n"))
	f.Add([]byte(`{"type":"subscribe","stream_id":"st-0","target":{"namespace":"d","host":"h","port":1,"last_event_id":3}}` + "\n"))
	f.Add([]byte(`{"type":"stream_closed","stream_id":"st-0","code":"unreachable"}` + "\n" + `{"type":"draining"}`))
	f.Add([]byte("\n\n{\"type\":\"heartbeat_ack\",\"seq\":18446744073709551615}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(bytes.NewReader(data))
		for range 64 {
			m, err := d.Decode()
			if err != nil {
				return
			}
			if err := m.Validate(); err != nil {
				t.Fatalf("decoded message does not validate: %v", err)
			}
			b, err := Append(nil, &m)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := NewDecoder(bytes.NewReader(b)).Decode(); err != nil && !errors.Is(err, ErrLineTooLong) {
				t.Fatalf("re-encoded message does not decode: %v: %s", err, b)
			}
		}
	})
}
