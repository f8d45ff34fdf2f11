package stats

// hashSet is a set of block sequence hashes that only grows: open
// addressing with linear probing over a table at most half full. The
// infinite-cache bound keeps every distinct block of a run (1.4 M for the
// Mooncake trace) and tests or adds one per prompt block; Go's map spent
// a tenth of a kv run's time there.
//
// Sequence hashes are xxh3 outputs, so a multiplicative spread suffices;
// keys made to collide slow the probes, never past the table's size.
type hashSet struct {
	slots   []uint64 // 0 marks an empty slot; the hash 0 is kept in hasZero
	shift   uint     // 64 - log2(len(slots))
	n       int
	hasZero bool
}

// has reports whether h is in the set.
func (s *hashSet) has(h uint64) bool {
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

// add puts h in the set.
func (s *hashSet) add(h uint64) {
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

// len is how many hashes the set holds.
func (s *hashSet) len() int {
	if s.hasZero {
		return s.n + 1
	}
	return s.n
}

func (s *hashSet) home(h uint64) int { return int((h * 0x9e3779b97f4a7c15) >> s.shift) }

func (s *hashSet) grow() {
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
			s.add(h)
		}
	}
}
