package replay

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"switchyard/fakefleet/wire"
	"switchyard/router/envelope"
)

func TestVLLMMessageIsTheLiveForm(t *testing.T) {
	payload := []byte{0x93, 0x01, 0x02, 0x03}
	reply := [][]byte{payload}
	msg, err := VLLMMessage([]byte("kv@10.0.0.1@m"), 77, reply)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg) != 3 || string(msg[0]) != "kv@10.0.0.1@m" || binary.BigEndian.Uint64(msg[1]) != 77 || !bytes.Equal(msg[2], payload) {
		t.Fatalf("rebuilt %q", msg)
	}
	payload[0] = 0 // the rebuilt message owns its bytes
	if msg[2][0] != 0x93 {
		t.Fatal("rebuilt message aliases the reply")
	}
	// Appending to a frame must not run into the next one.
	_ = append(msg[0], 'X')
	if binary.BigEndian.Uint64(msg[1]) != 77 {
		t.Fatal("frames share capacity")
	}
	if _, err := VLLMMessage(nil, 1, [][]byte{{1}, {2}}); err == nil {
		t.Fatal("two payload frames accepted")
	}
}

// A Dynamo reply rebuilds into frames the event-plane decoder accepts as
// it would the live message.
func TestDynamoMessageDecodesAsLive(t *testing.T) {
	live := wire.KVEventsMessage(0xABCDEF, 12, wire.RouterEvent{WorkerID: 3}, time.UnixMilli(1_700_000_000_000))
	msg, err := DynamoMessage(12, live)
	if err != nil {
		t.Fatal(err)
	}
	for i := range live {
		if !bytes.Equal(msg[i], live[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	var m envelope.Message
	if r := envelope.NewDecoder("kv-events", 1<<20).Decode(msg, &m); r != envelope.Applied {
		t.Fatalf("decoder says %v", r)
	}
	if m.PublisherID != 0xABCDEF || m.Sequence != 12 {
		t.Fatalf("decoded %+v", m)
	}
	if _, err := DynamoMessage(13, live); err == nil {
		t.Fatal("a reply whose sequence disagrees with its frames was accepted")
	}
	if _, err := DynamoMessage(12, live[:3]); err == nil {
		t.Fatal("three frames accepted")
	}
}
