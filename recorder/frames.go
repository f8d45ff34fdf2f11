package recorder

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The frames BLOB of load_messages and kv_messages holds one multipart
// message: a uvarint frame count, then for each frame a uvarint length and
// that many bytes. Nothing follows the last frame.

// EncodeFrames encodes a multipart message in the frames BLOB format.
func EncodeFrames(frames [][]byte) []byte {
	n := binary.MaxVarintLen64
	for _, f := range frames {
		n += binary.MaxVarintLen64 + len(f)
	}
	return AppendFrames(make([]byte, 0, n), frames)
}

// AppendFrames appends the frames BLOB encoding of frames to dst.
func AppendFrames(dst []byte, frames [][]byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(frames)))
	for _, f := range frames {
		dst = binary.AppendUvarint(dst, uint64(len(f)))
		dst = append(dst, f...)
	}
	return dst
}

// errFrames is wrapped by every DecodeFrames error.
var errFrames = errors.New("corrupt frames blob")

// DecodeFrames decodes a frames BLOB. The frames alias b; a zero-length
// frame comes back as an empty, non-nil slice. A recording is untrusted
// input: counts and lengths are checked against the bytes that remain
// before anything is allocated, and trailing bytes are refused.
func DecodeFrames(b []byte) ([][]byte, error) {
	return decodeFrames(nil, b)
}

// decodeFrames appends the frames of b to dst (reused by the writer's
// decoding loop). The result is never nil.
func decodeFrames(dst [][]byte, b []byte) ([][]byte, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, fmt.Errorf("%w: bad frame count", errFrames)
	}
	b = b[n:]
	// Every frame takes at least one byte (its length).
	if count > uint64(len(b)) {
		return nil, fmt.Errorf("%w: %d frames declared in %d bytes", errFrames, count, len(b))
	}
	if dst == nil || uint64(cap(dst)) < count {
		dst = make([][]byte, 0, count)
	}
	dst = dst[:0]
	for i := uint64(0); i < count; i++ {
		l, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("%w: bad length of frame %d", errFrames, i)
		}
		b = b[n:]
		if l > uint64(len(b)) {
			return nil, fmt.Errorf("%w: frame %d declares %d bytes, %d remain", errFrames, i, l, len(b))
		}
		dst = append(dst, b[:l:l])
		b = b[l:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errFrames, len(b))
	}
	return dst, nil
}
