package engine

// blockIndex maps cached block hashes to pool slots: open addressing with
// linear probing and backward-shift deletion. The pool inserts and
// evicts blocks all run long, and Go's map keeps the tombstones of those
// deletions in its probe sequences, which made its lookups the engine's
// largest cost; shifting entries back on delete keeps probes short.
//
// Block hashes are xxh3 outputs, so a multiplicative spread of them
// suffices. Keys chosen to collide only slow the probes down (never past
// the table's size); this is a model of an engine, not a server.
type blockIndex struct {
	entries []indexEntry // len is a power of two, or 0 before the first insert
	shift   uint         // 64 - log2(len(entries))
	n       int
}

// indexEntry is one slot; slot 0 (the pool's sentinel) marks it empty.
type indexEntry struct {
	hash uint64
	slot int32
}

func (x *blockIndex) home(hash uint64) int {
	return int((hash * 0x9e3779b97f4a7c15) >> x.shift)
}

// get returns the slot stored for hash, or 0.
func (x *blockIndex) get(hash uint64) int32 {
	if x.n == 0 {
		return 0
	}
	mask := len(x.entries) - 1
	for i := x.home(hash); ; i = (i + 1) & mask {
		e := &x.entries[i]
		if e.slot == 0 || e.hash == hash {
			return e.slot
		}
	}
}

// put stores slot (non-zero) for hash, replacing any earlier one.
func (x *blockIndex) put(hash uint64, slot int32) {
	if 2*(x.n+1) > len(x.entries) { // at most half full keeps probes short
		x.grow()
	}
	mask := len(x.entries) - 1
	for i := x.home(hash); ; i = (i + 1) & mask {
		e := &x.entries[i]
		if e.slot == 0 {
			*e = indexEntry{hash, slot}
			x.n++
			return
		}
		if e.hash == hash {
			e.slot = slot
			return
		}
	}
}

// del removes hash, shifting later entries of its probe run back so no
// lookup needs a tombstone to walk over.
func (x *blockIndex) del(hash uint64) {
	if x.n == 0 {
		return
	}
	mask := len(x.entries) - 1
	i := x.home(hash)
	for ; ; i = (i + 1) & mask {
		e := &x.entries[i]
		if e.slot == 0 {
			return // absent
		}
		if e.hash == hash {
			break
		}
	}
	x.n--
	for j := i; ; {
		j = (j + 1) & mask
		e := x.entries[j]
		if e.slot == 0 {
			break
		}
		// e stays where it is when its home lies cyclically in (i, j]:
		// moving it to i would put it before its home.
		k := x.home(e.hash)
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		x.entries[i] = e
		i = j
	}
	x.entries[i] = indexEntry{}
}

// len is how many hashes are stored.
func (x *blockIndex) len() int { return x.n }

// each calls f for every stored hash and slot, in table order (tests).
func (x *blockIndex) each(f func(hash uint64, slot int32)) {
	for _, e := range x.entries {
		if e.slot != 0 {
			f(e.hash, e.slot)
		}
	}
}

func (x *blockIndex) grow() {
	old := x.entries
	size := max(64, 2*len(old))
	x.entries = make([]indexEntry, size)
	x.shift = 64
	for s := size; s > 1; s >>= 1 {
		x.shift--
	}
	x.n = 0
	for _, e := range old {
		if e.slot != 0 {
			x.put(e.hash, e.slot)
		}
	}
}
