package k8ssource

import (
	"encoding/binary"
	"math/bits"
	"strings"
	"testing"
)

// The instance ids Dynamo's hash_pod_name gives these Pod names, and the
// unmasked 64-bit values older Dynamo releases used
// (docs/kubernetes.md, "Instance ids").
func TestHashPodNameVectors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		id, full uint64
	}{
		{"worker-0", 1186445869714687, 12863466981639851263},
		{"worker-99999", 7410589986301036, 12779619133209027692},
		{"deployment-with-hash-suffix-a1b2c3d4e5f6", 2590930466072916, 8000983868676073812},
		{"fake-name-1-0-worker-nrdfv", 1009006049675451, 16475176442970949819},
	} {
		if got := HashPodName(tc.name); got != tc.id {
			t.Errorf("HashPodName(%q) = %d, want %d", tc.name, got, tc.id)
		}
		if got := sipHash13(tc.name); got != tc.full {
			t.Errorf("sipHash13(%q) = %d, want %d", tc.name, got, tc.full)
		}
	}
}

// The streaming tail handling must agree with a plain SipHash-1-3 over
// name‖0xFF at every length modulo 8 (the vectors cover only some).
func TestHashPodNameEveryTailLength(t *testing.T) {
	for n := 0; n <= 40; n++ {
		name := strings.Repeat("abcdefghij", 5)[:n]
		want := referenceSipHash13(append([]byte(name), 0xFF)) & idMask
		if got := HashPodName(name); got != want {
			t.Errorf("length %d: HashPodName = %d, reference = %d", n, got, want)
		}
	}
}

func TestHashPodNameMasksTo53Bits(t *testing.T) {
	for _, name := range []string{"a", "worker-0", "prefill-7f9c8d-x2k4q", strings.Repeat("z", 253)} {
		if id := HashPodName(name); id>>53 != 0 {
			t.Errorf("HashPodName(%q) = %#x has bits above 53", name, id)
		}
	}
}

// referenceSipHash13 is the textbook algorithm over a whole message.
func referenceSipHash13(msg []byte) uint64 {
	v0, v1, v2, v3 := uint64(0x736f6d6570736575), uint64(0x646f72616e646f6d), uint64(0x6c7967656e657261), uint64(0x7465646279746573)
	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13) ^ v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16) ^ v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21) ^ v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17) ^ v2
		v2 = bits.RotateLeft64(v2, 32)
	}
	var padded [8]byte
	end := len(msg) - len(msg)%8
	for i := 0; i < end; i += 8 {
		m := binary.LittleEndian.Uint64(msg[i:])
		v3 ^= m
		round()
		v0 ^= m
	}
	copy(padded[:], msg[end:])
	padded[7] = byte(len(msg))
	m := binary.LittleEndian.Uint64(padded[:])
	v3 ^= m
	round()
	v0 ^= m
	v2 ^= 0xff
	round()
	round()
	round()
	return v0 ^ v1 ^ v2 ^ v3
}

// FuzzHashPodName checks the streaming hash against the textbook one on
// arbitrary names (Pod names are API-server validated, but the hash must
// not depend on that).
func FuzzHashPodName(f *testing.F) {
	for _, s := range []string{"", "worker-0", "1234567", "12345678", "fake-name-1-0-worker-nrdfv"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		want := referenceSipHash13(append([]byte(name), 0xFF)) & idMask
		if got := HashPodName(name); got != want {
			t.Fatalf("HashPodName(%q) = %d, reference = %d", name, got, want)
		}
	})
}
