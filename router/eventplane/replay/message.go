package replay

import (
	"encoding/binary"
	"fmt"
)

// The live form of a replayed batch: what the subscription would have
// read had the message not been lost, so the router decodes a replay with
// the decoder of its family. The result owns its memory (one allocation
// for the bytes), since replies alias the connection's buffers.

// VLLMMessage rebuilds a vLLM-native message [topic, seq (8 bytes BE),
// payload] from a reply's payload (one frame) and the subscription's
// topic.
func VLLMMessage(topic []byte, seq uint64, payload [][]byte) ([][]byte, error) {
	if len(payload) != 1 {
		return nil, fmt.Errorf("replay: a vLLM reply carries %d payload frames, want 1", len(payload))
	}
	buf := make([]byte, 0, len(topic)+8+len(payload[0]))
	buf = append(buf, topic...)
	buf = binary.BigEndian.AppendUint64(buf, seq)
	buf = append(buf, payload[0]...)
	t, s := len(topic), len(topic)+8
	return [][]byte{buf[:t:t], buf[t:s:s], buf[s:]}, nil
}

// DynamoFrames is the number of frames of a Dynamo event-plane message:
// topic, publisher id (8 bytes BE), sequence (8 bytes BE), envelope.
const DynamoFrames = 4

// DynamoMessage rebuilds a Dynamo event-plane message from a reply of
// Switchyard's replay extension, whose payload is the original four
// frames. The sequence frame must agree with the reply's sequence.
func DynamoMessage(seq uint64, payload [][]byte) ([][]byte, error) {
	if len(payload) != DynamoFrames {
		return nil, fmt.Errorf("replay: a Dynamo reply carries %d frames, want %d", len(payload), DynamoFrames)
	}
	if len(payload[2]) != 8 || binary.BigEndian.Uint64(payload[2]) != seq {
		return nil, fmt.Errorf("replay: a Dynamo reply's sequence frame does not say %d", seq)
	}
	n := 0
	for _, f := range payload {
		n += len(f)
	}
	buf := make([]byte, 0, n)
	out := make([][]byte, len(payload))
	for i, f := range payload {
		start := len(buf)
		buf = append(buf, f...)
		out[i] = buf[start:len(buf):len(buf)]
	}
	return out, nil
}
