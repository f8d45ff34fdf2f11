package kv

import (
	"cmp"
	"iter"
	"slices"
)

// Compiled-in ceilings of the device-tier index. Each is checked before
// the allocation it bounds; a block past any of them is refused and the
// event's result is OverCapacity.
const (
	// MaxIndexBlocks caps radix nodes (distinct token-hash paths from the
	// root), the root itself not counted.
	MaxIndexBlocks = 1 << 20
	// MaxBlocksPerRank caps the engine blocks (distinct engine block
	// hashes) one rank may hold.
	MaxBlocksPerRank = 1 << 18
	// MaxIndexOwnerships caps (rank, engine block) pairs over all ranks:
	// the entries of every rank's block lookup together.
	MaxIndexOwnerships = 1 << 23
	// MaxOwnersPerNode caps the ranks owning one node.
	MaxOwnersPerNode = 4096
	// MaxCursorsPerSubscription caps the (worker, dp_rank) cursors one
	// kv-events subscription may track. The index keeps one cursor per
	// live rank; the subscription handler enforces this bound on what one
	// publisher may name.
	MaxCursorsPerSubscription = 4096
	// MaxRanks caps the live ranks the index admits (see SetLive).
	MaxRanks = 65536
)

// Result is what Apply did with one event. The set is closed: metrics may
// pre-register one series per Results() entry.
type Result uint8

// Apply's results.
const (
	// Applied: the event changed (or confirmed) the index.
	Applied Result = iota
	// Replay: the event id is at or below the rank's cursor; skipped.
	Replay
	// Gap: the event id jumped past cursor+1. The rank's blocks were
	// cleared first, then the event was handled as usual (whatever its own
	// outcome: a chain anchored on a now-missing parent places nothing).
	Gap
	// OverCapacity: a block would pass a ceiling. Blocks before it in the
	// chain stay applied; it and the rest of the chain are refused.
	OverCapacity
	// IdentityMismatch: the (namespace, worker, dp_rank) is not live.
	IdentityMismatch
	// OtherTier: a non-device storage tier; not indexed.
	OtherTier
	// ParentNotFound: a store names a parent block the rank does not
	// hold; nothing of it is placed.
	ParentNotFound
	// UnknownBlock: a removal named at least one block the rank does not
	// hold. The held ones were removed.
	UnknownBlock
	// Malformed: an unknown kind, a store with no blocks or a removal
	// with no hashes.
	Malformed
	numResults
)

var resultNames = [numResults]string{
	Applied:          "applied",
	Replay:           "replay",
	Gap:              "gap",
	OverCapacity:     "over_capacity",
	IdentityMismatch: "identity_mismatch",
	OtherTier:        "other_tier",
	ParentNotFound:   "parent_not_found",
	UnknownBlock:     "unknown_block",
	Malformed:        "malformed",
}

func (r Result) String() string {
	if r < numResults {
		return resultNames[r]
	}
	return "unknown"
}

// Results lists every Result, in declaration order.
func Results() []Result {
	out := make([]Result, numResults)
	for i := range out {
		out[i] = Result(i)
	}
	return out
}

// limits are the ceilings one index enforces: the constants above, or
// smaller ones in tests.
type limits struct {
	nodes, perRank, ownerships, ownersPerNode, ranks int
}

var defaultLimits = limits{
	nodes:         MaxIndexBlocks,
	perRank:       MaxBlocksPerRank,
	ownerships:    MaxIndexOwnerships,
	ownersPerNode: MaxOwnersPerNode,
	ranks:         MaxRanks,
}

// childKey names a node by its parent and its tokens_hash. Both fields are
// 64-bit so the key has no padding and hashes as plain memory. A node's
// first child is linked from the node itself; only its siblings are in
// the child map, so a chain (one child per node) is walked without hashing.
type childKey struct {
	parent uint64
	hash   uint64
}

// node is one block position in the radix tree: the path of tokens_hash
// values from the root to it is the block's whole prefix.
type node struct {
	hash   uint64 // tokens_hash; the key under its parent
	parent int32
	first  int32 // one child (0: none linked), not in the child map
	nchild int32 // children: first, if any, plus those in the child map
	// changed is the epoch of the last change to owners; memoAt and memo
	// cache the difference from the parent's owners (see noMemo). The
	// order of the fields keeps a node at 56 bytes.
	changed uint32
	owners  []uint32 // slots of the ranks owning it, ascending
	memoAt  uint32
	memo    int32
}

// rankState is one live rank: its block lookup (engine block_hash to
// node) and its event cursor. A node named by k > 1 of the rank's engine
// hashes is owned once, with k-1 in extra: the rank's ownership of a node
// is reference-counted, and the common single reference costs nothing.
type rankState struct {
	rank      Rank
	blocks    map[uint64]int32
	extra     map[int32]uint32
	peak      int // most blocks held since blocks was allocated
	cursor    uint64
	hasCursor bool
}

// Go maps and slices keep their capacity when emptied. So that memory
// follows what is held rather than what once was, a rank's maps are
// rebuilt once it holds under a quarter of its peak (amortised O(1) per
// removal), and owner arrays are shrunk likewise and dropped with their
// node when large.
const (
	minRebuildBlocks = 64
	minShrinkOwners  = 64
)

// Index is the device-tier radix index of worker KV caches: which ranks
// hold which prefixes of token blocks. It is a pure state machine: no
// goroutines, no clock, no locking. Like the rest of the core it belongs to
// one goroutine at a time; the host serialises Apply, SetLive, ClearRank,
// FindMatches and Stats (FindMatches too updates its caches and scratch).
type Index struct {
	lim limits

	nodes    []node // nodes[0] is the root
	free     []int32
	children map[childKey]int32 // children other than their parent's first
	used     int                // nodes in use, root excluded
	owned    int                // (rank, engine block) pairs

	ranks     map[Rank]uint32 // live ranks to dense slots
	slots     []rankState
	freeSlots []uint32 // sorted descending: the lowest free slot is last

	// FindMatches state: the kept edge differences (diffs[0] unused) and
	// their free list, the owner-change counter that voids them, a
	// per-slot stamp of the ranks out of the running in the current query,
	// and scratch.
	diffs        []edgeDiff
	freeDiffs    []int32
	epoch        uint32
	gone         []uint32
	query        uint32
	onlyA, onlyB []uint32
}

// NewIndex returns an empty index that admits no rank until SetLive.
func NewIndex() *Index { return newIndex(defaultLimits) }

func newIndex(l limits) *Index {
	return &Index{
		lim:      l,
		nodes:    []node{{parent: -1}},
		children: map[childKey]int32{},
		ranks:    map[Rank]uint32{},
	}
}

// SetLive replaces the set of admitted ranks. Every rank no longer live
// loses all its blocks and its cursor, in the same call, so no later Apply
// or FindMatches sees a departed rank. Ranks that stay keep their state.
// At most MaxRanks are admitted, in the order live yields them; it returns
// how many were refused over that ceiling.
func (x *Index) SetLive(live iter.Seq[Rank]) (refused int) {
	next := make(map[Rank]struct{}, len(x.ranks))
	var added []Rank
	for r := range live {
		if _, dup := next[r]; dup {
			continue
		}
		if len(next) >= x.lim.ranks {
			refused++
			continue
		}
		next[r] = struct{}{}
		if _, held := x.ranks[r]; !held {
			added = append(added, r)
		}
	}
	for r, s := range x.ranks {
		if _, ok := next[r]; !ok {
			x.clearBlocks(s)
			x.slots[s] = rankState{}
			delete(x.ranks, r)
			x.freeSlots = append(x.freeSlots, s)
		}
	}
	// Lowest free slot first, so slot numbers (and with them the order of
	// FindMatches results) depend only on the sequence of calls.
	slices.SortFunc(x.freeSlots, func(a, b uint32) int { return cmp.Compare(b, a) })
	for _, r := range added {
		var s uint32
		if n := len(x.freeSlots); n > 0 {
			s = x.freeSlots[n-1]
			x.freeSlots = x.freeSlots[:n-1]
		} else {
			s = uint32(len(x.slots))
			x.slots = append(x.slots, rankState{})
		}
		x.slots[s] = rankState{rank: r}
		x.ranks[r] = s
	}
	if n := len(x.slots) - len(x.gone); n > 0 {
		x.gone = append(x.gone, make([]uint32, n)...)
	}
	return refused
}

// ClearAll drops every rank's blocks and cursors; the ranks stay live.
func (x *Index) ClearAll() {
	for _, s := range x.ranks {
		x.clearBlocks(s)
		x.slots[s].cursor, x.slots[s].hasCursor = 0, false
	}
}

// ClearRank drops every block and the cursor of a live rank (the host's
// Cleared-equivalent, e.g. for a subscription silent too long). It reports
// whether the rank is live.
func (x *Index) ClearRank(r Rank) bool {
	s, ok := x.ranks[r]
	if !ok {
		return false
	}
	x.clearBlocks(s)
	x.slots[s].cursor, x.slots[s].hasCursor = 0, false
	return true
}

// Apply folds one event from a publisher in namespace into the index and
// says what it did. In order: the rank must be live (IdentityMismatch);
// a non-zero event id is checked against the rank's cursor (Replay, or a
// Gap that clears the rank first); then only device-tier events (else
// OtherTier) of a known kind change the index. It allocates only to grow
// maps and owner arrays.
func (x *Index) Apply(namespace string, ev *Event) Result {
	s, ok := x.ranks[Rank{Namespace: namespace, WorkerID: ev.WorkerID, DPRank: ev.DPRank}]
	if !ok {
		return IdentityMismatch
	}
	rs := &x.slots[s]
	gap := false
	// The cursor orders the rank's whole event stream, whatever the tier
	// or kind: a publisher numbers events, not device-tier events.
	if ev.EventID != 0 {
		if rs.hasCursor {
			if ev.EventID <= rs.cursor {
				return Replay
			}
			if ev.EventID > rs.cursor+1 {
				x.clearBlocks(s)
				gap = true
			}
		}
		rs.cursor, rs.hasCursor = ev.EventID, true
	}
	res := x.apply(s, ev)
	if gap {
		return Gap
	}
	return res
}

func (x *Index) apply(s uint32, ev *Event) Result {
	if ev.Tier != TierDevice {
		return OtherTier
	}
	switch ev.Kind {
	case Stored:
		if len(ev.Blocks) == 0 {
			return Malformed
		}
		return x.store(s, ev)
	case Removed:
		if len(ev.Removed) == 0 {
			return Malformed
		}
		return x.remove(s, ev.Removed)
	case Cleared:
		x.clearBlocks(s)
		return Applied
	}
	return Malformed
}

func (x *Index) store(s uint32, ev *Event) Result {
	rs := &x.slots[s]
	cur := int32(0)
	if ev.HasParent {
		p, ok := rs.blocks[ev.ParentHash]
		if !ok {
			return ParentNotFound
		}
		cur = p
	}
	if rs.blocks == nil {
		rs.blocks = make(map[uint64]int32, len(ev.Blocks))
	}
	for _, b := range ev.Blocks {
		next, ok := x.place(s, rs, cur, b)
		if !ok {
			return OverCapacity
		}
		cur = next
	}
	return Applied
}

// place makes block b the child of cur owned by rank s, and returns its
// node, or false if a ceiling refuses it (nothing changed then).
func (x *Index) place(s uint32, rs *rankState, cur int32, b StoredBlock) (int32, bool) {
	child, exists := x.child(cur, b.TokensHash)
	old, held := rs.blocks[b.BlockHash]
	if held && exists && old == child {
		return child, true // the same block again
	}
	// Every ceiling before any change.
	if !exists && x.used >= x.lim.nodes {
		return 0, false
	}
	if !held && (len(rs.blocks) >= x.lim.perRank || x.owned >= x.lim.ownerships) {
		return 0, false
	}
	pos, owns := 0, false
	if exists {
		owners := x.nodes[child].owners
		pos, owns = findSlot(owners, s)
		if !owns && len(owners) >= x.lim.ownersPerNode {
			return 0, false
		}
	} else {
		child = x.newNode(cur, b.TokensHash)
	}
	if owns {
		if rs.extra == nil {
			rs.extra = map[int32]uint32{}
		}
		rs.extra[child]++
	} else {
		n := &x.nodes[child]
		n.owners = slices.Insert(n.owners, pos, s)
		x.ownersChanged(n)
	}
	rs.blocks[b.BlockHash] = child
	rs.peak = max(rs.peak, len(rs.blocks))
	if held {
		// The engine hash named another node: it names this one now. The
		// old node is released after the new one is held, and the new
		// one is a child of cur, so cur is never pruned here.
		x.release(s, rs, old)
	} else {
		x.owned++
	}
	return child, true
}

func (x *Index) remove(s uint32, hashes []uint64) Result {
	rs := &x.slots[s]
	res := Applied
	for _, h := range hashes {
		n, ok := rs.blocks[h]
		if !ok {
			res = UnknownBlock
			continue
		}
		delete(rs.blocks, h)
		x.owned--
		x.release(s, rs, n)
	}
	if rs.peak > minRebuildBlocks && len(rs.blocks) < rs.peak/4 {
		rs.blocks, rs.extra, rs.peak = rebuild(rs.blocks), rebuild(rs.extra), len(rs.blocks)
	}
	return res
}

// rebuild copies m into a map sized for what it holds now (maps.Clone
// may keep the source's capacity).
func rebuild[K comparable, V any](m map[K]V) map[K]V {
	if len(m) == 0 {
		return nil
	}
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// clearBlocks drops every block of rank s; the cursor stays.
func (x *Index) clearBlocks(s uint32) {
	rs := &x.slots[s]
	for _, n := range rs.blocks {
		x.release(s, rs, n)
	}
	x.owned -= len(rs.blocks)
	rs.blocks, rs.extra, rs.peak = nil, nil, 0
}

// release drops one reference of rank s on node n, and frees n and its
// ancestors as they become ownerless leaves.
func (x *Index) release(s uint32, rs *rankState, n int32) {
	if k := rs.extra[n]; k > 0 {
		if k == 1 {
			delete(rs.extra, n)
		} else {
			rs.extra[n] = k - 1
		}
		return
	}
	nd := &x.nodes[n]
	pos, ok := findSlot(nd.owners, s)
	if !ok {
		return // unreachable while the invariants hold
	}
	nd.owners = slices.Delete(nd.owners, pos, pos+1)
	x.ownersChanged(nd)
	if c := cap(nd.owners); c >= minShrinkOwners && len(nd.owners) < c/4 {
		nd.owners = slices.Clone(nd.owners)
	}
	x.prune(n)
}

func (x *Index) prune(n int32) {
	for n != 0 {
		nd := &x.nodes[n]
		if len(nd.owners) != 0 || nd.nchild != 0 {
			return
		}
		p := nd.parent
		if x.nodes[p].first == n {
			x.nodes[p].first = 0
		} else {
			delete(x.children, childKey{uint64(p), nd.hash})
		}
		nd.hash, nd.parent = 0, -1
		x.dropDiff(nd)
		nd.memoAt = 0
		if cap(nd.owners) >= minShrinkOwners {
			nd.owners = nil
		} else {
			nd.owners = nd.owners[:0] // kept for the next node here
		}
		x.free = append(x.free, n)
		x.used--
		x.nodes[p].nchild--
		n = p
	}
}

func (x *Index) newNode(parent int32, hash uint64) int32 {
	var n int32
	if k := len(x.free); k > 0 {
		n = x.free[k-1]
		x.free = x.free[:k-1]
	} else {
		n = int32(len(x.nodes))
		x.nodes = append(x.nodes, node{})
	}
	nd := &x.nodes[n]
	nd.hash, nd.parent, nd.first, nd.nchild, nd.changed = hash, parent, 0, 0, 0
	p := &x.nodes[parent]
	if p.first == 0 {
		p.first = n
	} else {
		x.children[childKey{uint64(parent), hash}] = n
	}
	p.nchild++
	x.used++
	return n
}

// child finds cur's child keyed by tokens hash h.
func (x *Index) child(cur int32, h uint64) (int32, bool) {
	nd := &x.nodes[cur]
	f := nd.first
	if f != 0 && x.nodes[f].hash == h {
		return f, true
	}
	if f != 0 && nd.nchild == 1 || nd.nchild == 0 {
		return 0, false // no sibling in the map
	}
	c, ok := x.children[childKey{uint64(cur), h}]
	return c, ok
}

// findSlot returns where slot is, or would be inserted, in the ascending
// owners.
func findSlot(owners []uint32, slot uint32) (int, bool) {
	lo, hi := 0, len(owners)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if owners[m] < slot {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(owners) && owners[lo] == slot
}

// RankStats is one live rank's share of the index.
type RankStats struct {
	Rank Rank
	// Blocks is how many engine blocks the rank holds.
	Blocks int
	// Cursor is the last event id applied; HasCursor is false until the
	// rank's first event with an id (and after a clear of the rank).
	Cursor    uint64
	HasCursor bool
}

// Stats is the index's size, for metrics and the admin API.
type Stats struct {
	// Nodes in use (distinct block prefixes), the root not counted.
	Nodes int
	// Ownerships are (rank, engine block) pairs; the sum of Ranks' Blocks.
	Ownerships int
	// Ranks lists every live rank, sorted by namespace, worker, dp_rank.
	Ranks []RankStats
}

// Stats reports the index's size. It allocates; it is not for hot paths.
func (x *Index) Stats() Stats {
	st := Stats{Nodes: x.used, Ownerships: x.owned, Ranks: make([]RankStats, 0, len(x.ranks))}
	for r, s := range x.ranks {
		rs := &x.slots[s]
		st.Ranks = append(st.Ranks, RankStats{Rank: r, Blocks: len(rs.blocks), Cursor: rs.cursor, HasCursor: rs.hasCursor})
	}
	slices.SortFunc(st.Ranks, func(a, b RankStats) int { return compareRank(a.Rank, b.Rank) })
	return st
}

func compareRank(a, b Rank) int {
	if c := cmp.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	if c := cmp.Compare(a.WorkerID, b.WorkerID); c != 0 {
		return c
	}
	return cmp.Compare(a.DPRank, b.DPRank)
}
