// Package msgpack is a small, allocation-free MessagePack reader for the
// event-plane decoders. It reads only what Dynamo's rmp-serde encoders
// write (maps, arrays, unsigned and signed integers, nil, booleans, strings,
// binaries, floats) and skips anything else it can parse. Every length is
// checked against the bytes that remain before it is used, so a hostile
// header can neither allocate nor loop beyond the input.
package msgpack

import (
	"encoding/binary"
	"errors"
	"math"
)

// MaxDepth bounds nesting while skipping values.
const MaxDepth = 32

// ErrMalformed reports input that is not the MessagePack expected here.
var ErrMalformed = errors.New("malformed msgpack")

// Reader walks a MessagePack buffer. The zero value reads nothing; Reset
// points it at a buffer. Byte slices it returns alias that buffer.
type Reader struct {
	b   []byte
	off int
}

// NewReader reads b.
func NewReader(b []byte) Reader { return Reader{b: b} }

// Reset points the reader at b.
func (r *Reader) Reset(b []byte) { r.b, r.off = b, 0 }

// Remaining is the number of unread bytes.
func (r *Reader) Remaining() int { return len(r.b) - r.off }

func (r *Reader) peek() (byte, bool) {
	if r.off >= len(r.b) {
		return 0, false
	}
	return r.b[r.off], true
}

func (r *Reader) take(n int) ([]byte, bool) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, false
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s, true
}

func (r *Reader) u8() (uint64, bool) {
	s, ok := r.take(1)
	if !ok {
		return 0, false
	}
	return uint64(s[0]), true
}

func (r *Reader) u16() (uint64, bool) {
	s, ok := r.take(2)
	if !ok {
		return 0, false
	}
	return uint64(binary.BigEndian.Uint16(s)), true
}

func (r *Reader) u32() (uint64, bool) {
	s, ok := r.take(4)
	if !ok {
		return 0, false
	}
	return uint64(binary.BigEndian.Uint32(s)), true
}

func (r *Reader) u64() (uint64, bool) {
	s, ok := r.take(8)
	if !ok {
		return 0, false
	}
	return binary.BigEndian.Uint64(s), true
}

// IsNil consumes a nil and reports true, or leaves a non-nil value unread.
func (r *Reader) IsNil() bool {
	if c, ok := r.peek(); ok && c == 0xc0 {
		r.off++
		return true
	}
	return false
}

// MapLen reads a map header.
func (r *Reader) MapLen() (int, error) {
	c, ok := r.peek()
	if !ok {
		return 0, ErrMalformed
	}
	var n uint64
	switch {
	case c >= 0x80 && c <= 0x8f:
		r.off++
		n = uint64(c & 0x0f)
	case c == 0xde:
		r.off++
		n, ok = r.u16()
	case c == 0xdf:
		r.off++
		n, ok = r.u32()
	default:
		return 0, ErrMalformed
	}
	// Each entry takes at least two bytes.
	if !ok || n > uint64(r.Remaining())/2 {
		return 0, ErrMalformed
	}
	return int(n), nil
}

// ArrayLen reads an array header.
func (r *Reader) ArrayLen() (int, error) {
	c, ok := r.peek()
	if !ok {
		return 0, ErrMalformed
	}
	var n uint64
	switch {
	case c >= 0x90 && c <= 0x9f:
		r.off++
		n = uint64(c & 0x0f)
	case c == 0xdc:
		r.off++
		n, ok = r.u16()
	case c == 0xdd:
		r.off++
		n, ok = r.u32()
	default:
		return 0, ErrMalformed
	}
	if !ok || n > uint64(r.Remaining()) {
		return 0, ErrMalformed
	}
	return int(n), nil
}

// IsMap reports whether the next value is a map (without consuming it).
func (r *Reader) IsMap() bool {
	c, ok := r.peek()
	return ok && (c >= 0x80 && c <= 0x8f || c == 0xde || c == 0xdf)
}

// IsArray reports whether the next value is an array.
func (r *Reader) IsArray() bool {
	c, ok := r.peek()
	return ok && (c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd)
}

// Uint reads a non-negative integer of any width (negative values are
// malformed: every field read this way is unsigned upstream).
func (r *Reader) Uint() (uint64, error) {
	c, ok := r.peek()
	if !ok {
		return 0, ErrMalformed
	}
	r.off++
	var v uint64
	switch {
	case c <= 0x7f:
		return uint64(c), nil
	case c == 0xcc:
		v, ok = r.u8()
	case c == 0xcd:
		v, ok = r.u16()
	case c == 0xce:
		v, ok = r.u32()
	case c == 0xcf:
		v, ok = r.u64()
	case c == 0xd0, c == 0xd1, c == 0xd2, c == 0xd3:
		var s int64
		s, ok = r.signed(c)
		if ok && s < 0 {
			return 0, ErrMalformed
		}
		v = uint64(s)
	default:
		r.off--
		return 0, ErrMalformed
	}
	if !ok {
		return 0, ErrMalformed
	}
	return v, nil
}

func (r *Reader) signed(c byte) (int64, bool) {
	switch c {
	case 0xd0:
		v, ok := r.u8()
		return int64(int8(v)), ok
	case 0xd1:
		v, ok := r.u16()
		return int64(int16(v)), ok
	case 0xd2:
		v, ok := r.u32()
		return int64(int32(v)), ok
	default:
		v, ok := r.u64()
		return int64(v), ok
	}
}

// Bytes reads a str or bin value and returns it without copying.
func (r *Reader) Bytes() ([]byte, error) {
	c, ok := r.peek()
	if !ok {
		return nil, ErrMalformed
	}
	r.off++
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c == 0xd9, c == 0xc4:
		n, ok = r.u8()
	case c == 0xda, c == 0xc5:
		n, ok = r.u16()
	case c == 0xdb, c == 0xc6:
		n, ok = r.u32()
	default:
		r.off--
		return nil, ErrMalformed
	}
	if !ok || n > uint64(r.Remaining()) {
		return nil, ErrMalformed
	}
	s, _ := r.take(int(n))
	return s, nil
}

// ByteArray reads an array of small integers (an older encoding of bytes)
// into dst, which bounds it; it fails if the array does not fit.
func (r *Reader) ByteArray(dst []byte) ([]byte, error) {
	n, err := r.ArrayLen()
	if err != nil {
		return nil, err
	}
	if n > cap(dst) {
		return nil, ErrMalformed
	}
	dst = dst[:n]
	for i := range dst {
		v, err := r.Uint()
		if err != nil || v > math.MaxUint8 {
			return nil, ErrMalformed
		}
		dst[i] = byte(v)
	}
	return dst, nil
}

// Skip consumes one value of any type.
func (r *Reader) Skip() error { return r.skip(0) }

func (r *Reader) skip(depth int) error {
	if depth > MaxDepth {
		return ErrMalformed
	}
	c, ok := r.peek()
	if !ok {
		return ErrMalformed
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		r.off++
		return nil
	case c >= 0x80 && c <= 0x8f, c == 0xde, c == 0xdf:
		n, err := r.MapLen()
		if err != nil {
			return err
		}
		for i := 0; i < 2*n; i++ {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c >= 0x90 && c <= 0x9f, c == 0xdc, c == 0xdd:
		n, err := r.ArrayLen()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c >= 0xa0 && c <= 0xbf, c == 0xd9, c == 0xda, c == 0xdb, c == 0xc4, c == 0xc5, c == 0xc6:
		_, err := r.Bytes()
		return err
	}
	r.off++
	var n int
	switch c {
	case 0xcc, 0xd0:
		n = 1
	case 0xcd, 0xd1:
		n = 2
	case 0xce, 0xd2, 0xca:
		n = 4
	case 0xcf, 0xd3, 0xcb:
		n = 8
	case 0xd4:
		n = 2 // fixext1: type + 1
	case 0xd5:
		n = 3
	case 0xd6:
		n = 5
	case 0xd7:
		n = 9
	case 0xd8:
		n = 17
	case 0xc7, 0xc8, 0xc9: // ext8/16/32: length, type, data
		var l uint64
		switch c {
		case 0xc7:
			l, ok = r.u8()
		case 0xc8:
			l, ok = r.u16()
		default:
			l, ok = r.u32()
		}
		if !ok || l+1 > uint64(r.Remaining()) {
			return ErrMalformed
		}
		n = int(l) + 1
	default:
		return ErrMalformed // 0xc1 is never used
	}
	if _, ok := r.take(n); !ok {
		return ErrMalformed
	}
	return nil
}
