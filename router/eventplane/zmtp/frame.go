package zmtp

import "encoding/binary"

// Frame flags (23/ZMTP §"Framing"). Bits 3..7 are reserved and must be zero.
const (
	flagMore     = 0x01
	flagLong     = 0x02
	flagCommand  = 0x04
	flagReserved = 0xF8
)

// readFrameSize reads the size that follows a flags byte: one octet, or eight
// big-endian octets when LONG is set. The size is returned unchecked as a
// uint64 so that callers compare it with their ceiling before converting it
// to an int — a declared 2^64-1 must not wrap into something small.
func readFrameSize(r *reader, flags byte) (uint64, error) {
	if flags&flagLong == 0 {
		b, err := r.readByte()
		return uint64(b), err
	}
	b, err := r.peek(8)
	if err != nil {
		return 0, err
	}
	size := binary.BigEndian.Uint64(b)
	r.discard(8)
	return size, nil
}

// appendFrameHeader appends a flags byte and the size in the shortest form.
func appendFrameHeader(dst []byte, flags byte, size int) []byte {
	if size <= 0xFF {
		return append(dst, flags, byte(size))
	}
	dst = append(dst, flags|flagLong)
	return binary.BigEndian.AppendUint64(dst, uint64(size))
}
