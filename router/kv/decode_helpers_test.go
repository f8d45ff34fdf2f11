package kv_test

import (
	"bytes"
	"encoding/binary"

	"github.com/vmihailenco/msgpack/v5"
)

// decField is one entry of an ordered msgpack map.
type decField struct {
	k string
	v any
}

// decMap is a msgpack map whose keys keep their order, for hand-built
// payloads (Go maps would shuffle them).
type decMap []decField

var _ msgpack.CustomEncoder = decMap(nil)

func (m decMap) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeMapLen(len(m)); err != nil {
		return err
	}
	for _, f := range m {
		if err := e.EncodeString(f.k); err != nil {
			return err
		}
		if err := e.Encode(f.v); err != nil {
			return err
		}
	}
	return nil
}

// decPack encodes v with compact integers, as rmp-serde and msgspec write.
func decPack(v any) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// decInt returns the msgpack encoding of v with a chosen signed width
// (0xd0 int8 ... 0xd3 int64), to test every form a hash may take.
func decInt(code byte, v int64) msgpack.RawMessage {
	switch code {
	case 0xd0:
		return msgpack.RawMessage{code, byte(int8(v))}
	case 0xd1:
		return binary.BigEndian.AppendUint16([]byte{code}, uint16(int16(v)))
	case 0xd2:
		return binary.BigEndian.AppendUint32([]byte{code}, uint32(int32(v)))
	}
	return binary.BigEndian.AppendUint64([]byte{0xd3}, uint64(v))
}

// decUint returns v as a uint64 msgpack value regardless of size.
func decUint(v uint64) msgpack.RawMessage {
	return binary.BigEndian.AppendUint64([]byte{0xcf}, v)
}
