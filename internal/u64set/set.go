// Package u64set is a set of uint64 keys that only grows, for the
// simulator's infinite caches: the hit-ratio bound's block hashes (1.4 M
// for the Mooncake trace) and a trace's hash ids. Go's map spent a tenth
// of a kv run's time there.
package u64set

// Set is open addressing with linear probing over a table at most half
// full; the zero value is empty. Keys are xxh3 outputs or a trace's
// sequential hash ids, which a multiplicative spread scatters; keys made
// to collide slow the probes, never past the table's size.
type Set struct {
	slots   []uint64 // 0 marks an empty slot; the hash 0 is kept in hasZero
	shift   uint     // 64 - log2(len(slots))
	n       int
	hasZero bool
}

// Has reports whether h is in the set.
func (s *Set) Has(h uint64) bool {
	if h == 0 {
		return s.hasZero
	}
	if s.n == 0 {
		return false
	}
	mask := len(s.slots) - 1
	for i := s.home(h); ; i = (i + 1) & mask {
		switch s.slots[i] {
		case h:
			return true
		case 0:
			return false
		}
	}
}

// Add puts h in the set.
func (s *Set) Add(h uint64) {
	if h == 0 {
		s.hasZero = true
		return
	}
	if 2*(s.n+1) > len(s.slots) {
		s.grow()
	}
	mask := len(s.slots) - 1
	for i := s.home(h); ; i = (i + 1) & mask {
		switch s.slots[i] {
		case h:
			return
		case 0:
			s.slots[i] = h
			s.n++
			return
		}
	}
}

// Len is how many hashes the set holds.
func (s *Set) Len() int {
	if s.hasZero {
		return s.n + 1
	}
	return s.n
}

func (s *Set) home(h uint64) int { return int((h * 0x9e3779b97f4a7c15) >> s.shift) }

func (s *Set) grow() {
	old := s.slots
	size := max(1024, 2*len(old))
	s.slots = make([]uint64, size)
	s.shift = 64
	for n := size; n > 1; n >>= 1 {
		s.shift--
	}
	s.n = 0
	for _, h := range old {
		if h != 0 {
			s.Add(h)
		}
	}
}
