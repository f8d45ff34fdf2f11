package k8ssource

import (
	"encoding/binary"
	"math/bits"
)

// idMask keeps the low 53 bits, so an id survives a JSON number (float64)
// round trip; Dynamo masks the same way.
const idMask = 0x001F_FFFF_FFFF_FFFF

// HashPodName is the instance id Dynamo's Kubernetes discovery gives the
// worker in a Pod: Rust's DefaultHasher (SipHash-1-3 with zero keys) over
// the name as a str, which hashes the UTF-8 bytes followed by one 0xFF
// byte, masked to 53 bits. The direct-mode frontend resolves pinned ids
// with this function, so it must match bit for bit.
func HashPodName(name string) uint64 {
	return sipHash13(name) & idMask
}

// sipHash13 is SipHash-1-3 with k0 = k1 = 0 over name‖0xFF, computed
// without building the suffixed copy.
func sipHash13(name string) uint64 {
	s := sipState{
		v0: 0x736f6d6570736575,
		v1: 0x646f72616e646f6d,
		v2: 0x6c7967656e657261,
		v3: 0x7465646279746573,
	}
	n := len(name) + 1 // the str terminator byte 0xFF
	full := n / 8 * 8
	for i := 0; i+8 <= len(name); i += 8 {
		s.compress(binary.LittleEndian.Uint64([]byte(name[i : i+8])))
	}
	// The tail: the bytes after the last full word (ending in 0xFF), with
	// the total length in the top byte.
	last := uint64(n&0xff) << 56
	for i := full; i < n; i++ {
		b := byte(0xFF)
		if i < len(name) {
			b = name[i]
		}
		last |= uint64(b) << (8 * (i - full))
	}
	if full > len(name) {
		// name‖0xFF filled a whole word only when len(name)%8 == 7; that
		// word holds the 0xFF and was not compressed by the loop above.
		word := uint64(0xFF) << 56
		for i := full - 8; i < len(name); i++ {
			word |= uint64(name[i]) << (8 * (i - (full - 8)))
		}
		s.compress(word)
	}
	s.compress(last)
	s.v2 ^= 0xff
	s.round()
	s.round()
	s.round()
	return s.v0 ^ s.v1 ^ s.v2 ^ s.v3
}

type sipState struct{ v0, v1, v2, v3 uint64 }

// compress absorbs one word with a single SipRound (the "1" in 1-3).
func (s *sipState) compress(m uint64) {
	s.v3 ^= m
	s.round()
	s.v0 ^= m
}

func (s *sipState) round() {
	s.v0 += s.v1
	s.v1 = bits.RotateLeft64(s.v1, 13)
	s.v1 ^= s.v0
	s.v0 = bits.RotateLeft64(s.v0, 32)
	s.v2 += s.v3
	s.v3 = bits.RotateLeft64(s.v3, 16)
	s.v3 ^= s.v2
	s.v0 += s.v3
	s.v3 = bits.RotateLeft64(s.v3, 21)
	s.v3 ^= s.v0
	s.v2 += s.v1
	s.v1 = bits.RotateLeft64(s.v1, 17)
	s.v1 ^= s.v2
	s.v2 = bits.RotateLeft64(s.v2, 32)
}
