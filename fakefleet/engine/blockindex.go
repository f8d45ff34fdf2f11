package engine

// blockIndex maps cached block hashes to pool slots: open addressing with
// linear probing and backward-shift deletion. The pool inserts and evicts
// blocks all run long; Go's map kept the tombstones of those deletions in
// its probe sequences, which made its lookups the engine's largest cost,
// while shifting entries back on delete keeps probes short.
//
// An entry is 8 bytes, the upper half of the block's hash (its tag) over
// its slot, so eight share a cache line and the table of a full 16 Ki-block
// pool fits in 256 KiB; a lookup confirms a tag match against the slab's
// full hash. The home slot is a multiplicative spread of the tag, so moving
// entries never reads the slab. Block hashes are xxh3 outputs; keys chosen
// to collide only slow the probes (never past the table's size), and this
// is a model of an engine, not a server.
type blockIndex struct {
	entries []uint64 // tag<<32 | slot; 0 is empty (slot 0 is the pool's sentinel)
	shift   uint     // 32 - log2(len(entries))
	n       int
}

func tagOf(hash uint64) uint32 { return uint32(hash >> 32) }

func (x *blockIndex) home(tag uint32) int { return int((tag * 0x9e3779b1) >> x.shift) }

// get returns the slot of the block with this hash in slab, or 0.
func (x *blockIndex) get(hash uint64, slab []cachedBlock) int32 {
	if x.n == 0 {
		return 0
	}
	tag, mask := tagOf(hash), len(x.entries)-1
	for i := x.home(tag); ; i = (i + 1) & mask {
		e := x.entries[i]
		if e == 0 {
			return 0
		}
		if uint32(e>>32) == tag {
			if s := int32(uint32(e)); slab[s].hash == hash {
				return s
			}
		}
	}
}

// put stores slot (non-zero) for a hash not in the index.
func (x *blockIndex) put(hash uint64, slot int32) {
	if 4*(x.n+1) > 3*len(x.entries) { // at most three quarters full
		x.grow()
	}
	tag, mask := tagOf(hash), len(x.entries)-1
	i := x.home(tag)
	for x.entries[i] != 0 {
		i = (i + 1) & mask
	}
	x.entries[i] = uint64(tag)<<32 | uint64(uint32(slot))
	x.n++
}

// del removes the entry of slot, whose block has this hash, shifting later
// entries of its probe run back so no lookup walks over a tombstone.
func (x *blockIndex) del(hash uint64, slot int32) {
	if x.n == 0 {
		return
	}
	tag, mask := tagOf(hash), len(x.entries)-1
	want := uint64(tag)<<32 | uint64(uint32(slot))
	i := x.home(tag)
	for ; x.entries[i] != want; i = (i + 1) & mask {
		if x.entries[i] == 0 {
			return // absent
		}
	}
	x.n--
	for j := i; ; {
		j = (j + 1) & mask
		e := x.entries[j]
		if e == 0 {
			break
		}
		// e stays where it is when its home lies cyclically in (i, j]:
		// moving it to i would put it before its home.
		k := x.home(uint32(e >> 32))
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		x.entries[i] = e
		i = j
	}
	x.entries[i] = 0
}

// len is how many blocks are indexed.
func (x *blockIndex) len() int { return x.n }

// each calls f for every indexed slot, in table order (tests).
func (x *blockIndex) each(f func(slot int32)) {
	for _, e := range x.entries {
		if e != 0 {
			f(int32(uint32(e)))
		}
	}
}

func (x *blockIndex) grow() {
	old := x.entries
	size := max(64, 2*len(old))
	x.entries = make([]uint64, size)
	x.shift = 32
	for s := size; s > 1; s >>= 1 {
		x.shift--
	}
	mask := size - 1
	for _, e := range old {
		if e != 0 {
			i := x.home(uint32(e >> 32))
			for x.entries[i] != 0 {
				i = (i + 1) & mask
			}
			x.entries[i] = e
		}
	}
}
