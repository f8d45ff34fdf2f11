package kv

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// refIndex is the naive reference the index is checked against: per rank,
// a map from engine block hash to the block's whole path of tokens hashes
// (a string of little-endian words), and brute-force matching over those
// paths. Ceilings are modelled from the same definitions: a node is a
// distinct prefix of some held path, an ownership is a map entry.
type refIndex struct {
	lim    limits
	ranks  map[Rank]*refRank
	prefix map[string]int          // prefix path -> held paths extending it (nodes = len)
	owners map[string]map[Rank]int // path -> rank -> entries naming it
	owned  int
}

type refRank struct {
	blocks    map[uint64]string
	cursor    uint64
	hasCursor bool
}

func newRef(l limits) *refIndex {
	return &refIndex{lim: l, ranks: map[Rank]*refRank{}, prefix: map[string]int{}, owners: map[string]map[Rank]int{}}
}

func pathKey(parent string, h uint64) string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], h)
	return parent + string(b[:])
}

func (m *refIndex) hold(r Rank, path string) {
	for i := 8; i <= len(path); i += 8 {
		m.prefix[path[:i]]++
	}
	o := m.owners[path]
	if o == nil {
		o = map[Rank]int{}
		m.owners[path] = o
	}
	o[r]++
}

func (m *refIndex) drop(r Rank, path string) {
	for i := 8; i <= len(path); i += 8 {
		if m.prefix[path[:i]]--; m.prefix[path[:i]] == 0 {
			delete(m.prefix, path[:i])
		}
	}
	o := m.owners[path]
	if o[r]--; o[r] == 0 {
		delete(o, r)
		if len(o) == 0 {
			delete(m.owners, path)
		}
	}
}

func (m *refIndex) clearBlocks(r Rank) {
	rk := m.ranks[r]
	for _, p := range rk.blocks {
		m.drop(r, p)
		m.owned--
	}
	rk.blocks = map[uint64]string{}
}

func (m *refIndex) setLive(live []Rank) int {
	next := map[Rank]bool{}
	refused := 0
	for _, r := range live {
		if next[r] {
			continue
		}
		if len(next) >= m.lim.ranks {
			refused++
			continue
		}
		next[r] = true
	}
	for r := range m.ranks {
		if !next[r] {
			m.clearBlocks(r)
			delete(m.ranks, r)
		}
	}
	for r := range next {
		if m.ranks[r] == nil {
			m.ranks[r] = &refRank{blocks: map[uint64]string{}}
		}
	}
	return refused
}

func (m *refIndex) clearRank(r Rank) bool {
	rk := m.ranks[r]
	if rk == nil {
		return false
	}
	m.clearBlocks(r)
	rk.cursor, rk.hasCursor = 0, false
	return true
}

func (m *refIndex) apply(ns string, ev *Event) Result {
	r := Rank{ns, ev.WorkerID, ev.DPRank}
	rk := m.ranks[r]
	if rk == nil {
		return IdentityMismatch
	}
	gap := false
	if ev.EventID != 0 {
		if rk.hasCursor && ev.EventID <= rk.cursor {
			return Replay
		}
		if rk.hasCursor && ev.EventID != rk.cursor+1 {
			m.clearBlocks(r)
			gap = true
		}
		rk.cursor, rk.hasCursor = ev.EventID, true
	}
	res := m.applyData(r, rk, ev)
	if gap {
		return Gap
	}
	return res
}

func (m *refIndex) applyData(r Rank, rk *refRank, ev *Event) Result {
	if ev.Tier != TierDevice {
		return OtherTier
	}
	switch ev.Kind {
	case Stored:
		if len(ev.Blocks) == 0 {
			return Malformed
		}
		cur := ""
		if ev.HasParent {
			p, ok := rk.blocks[ev.ParentHash]
			if !ok {
				return ParentNotFound
			}
			cur = p
		}
		for _, b := range ev.Blocks {
			path := pathKey(cur, b.TokensHash)
			old, held := rk.blocks[b.BlockHash]
			if held && old == path {
				cur = path
				continue
			}
			exists := m.prefix[path] > 0
			if !exists && len(m.prefix) >= m.lim.nodes {
				return OverCapacity
			}
			if !held && (len(rk.blocks) >= m.lim.perRank || m.owned >= m.lim.ownerships) {
				return OverCapacity
			}
			if exists && m.owners[path][r] == 0 && len(m.owners[path]) >= m.lim.ownersPerNode {
				return OverCapacity
			}
			m.hold(r, path)
			rk.blocks[b.BlockHash] = path
			if held {
				m.drop(r, old)
			} else {
				m.owned++
			}
			cur = path
		}
		return Applied
	case Removed:
		if len(ev.Removed) == 0 {
			return Malformed
		}
		res := Applied
		for _, h := range ev.Removed {
			p, ok := rk.blocks[h]
			if !ok {
				res = UnknownBlock
				continue
			}
			delete(rk.blocks, h)
			m.drop(r, p)
			m.owned--
		}
		return res
	case Cleared:
		m.clearBlocks(r)
		return Applied
	}
	return Malformed
}

func (m *refIndex) matches(prompt []uint64) map[Rank]uint32 {
	out := map[Rank]uint32{}
	for r, rk := range m.ranks {
		held := map[string]bool{}
		for _, p := range rk.blocks {
			held[p] = true
		}
		path := ""
		n := uint32(0)
		for _, h := range prompt {
			path = pathKey(path, h)
			if !held[path] {
				break
			}
			n++
		}
		if n > 0 {
			out[r] = n
		}
	}
	return out
}

// checkIndex verifies the index's structural invariants and returns the
// first violation.
func checkIndex(x *Index) error {
	if x.nodes[0].parent != -1 {
		return fmt.Errorf("root has parent %d", x.nodes[0].parent)
	}
	freed := map[int32]bool{}
	for _, n := range x.free {
		if n <= 0 || int(n) >= len(x.nodes) || freed[n] {
			return fmt.Errorf("bad free entry %d", n)
		}
		freed[n] = true
		if x.nodes[n].parent != -1 || len(x.nodes[n].owners) != 0 {
			return fmt.Errorf("freed node %d still linked", n)
		}
	}
	inUse := len(x.nodes) - 1 - len(x.free)
	if inUse != x.used {
		return fmt.Errorf("used = %d, nodes in use = %d", x.used, inUse)
	}
	if x.used > x.lim.nodes || x.owned > x.lim.ownerships {
		return fmt.Errorf("ceiling passed: %d nodes, %d ownerships", x.used, x.owned)
	}
	liveSlot := map[uint32]Rank{}
	for r, s := range x.ranks {
		if _, dup := liveSlot[s]; dup {
			return fmt.Errorf("slot %d interned twice", s)
		}
		liveSlot[s] = r
		if x.slots[s].rank != r {
			return fmt.Errorf("slot %d holds %v, interned for %v", s, x.slots[s].rank, r)
		}
	}
	if len(x.ranks) > x.lim.ranks {
		return fmt.Errorf("%d live ranks over %d", len(x.ranks), x.lim.ranks)
	}
	nchild := make([]int32, len(x.nodes))
	refs, firsts := 0, 0
	for i := 1; i < len(x.nodes); i++ {
		n := int32(i)
		if freed[n] {
			continue
		}
		nd := &x.nodes[n]
		if nd.parent < 0 || int(nd.parent) >= len(x.nodes) || freed[nd.parent] {
			return fmt.Errorf("node %d has dead parent %d", n, nd.parent)
		}
		nchild[nd.parent]++
		got, inMap := x.children[childKey{uint64(nd.parent), nd.hash}]
		if first := x.nodes[nd.parent].first == n; first == inMap || inMap && got != n {
			return fmt.Errorf("node %d: first child of its parent %v, in the child map %v (%d)", n, first, inMap, got)
		} else if first {
			firsts++
		}
		if c, ok := x.child(nd.parent, nd.hash); !ok || c != n {
			return fmt.Errorf("node %d not found under its parent (%d, %v)", n, c, ok)
		}
		if len(nd.owners) > x.lim.ownersPerNode {
			return fmt.Errorf("node %d has %d owners", n, len(nd.owners))
		}
		for k, o := range nd.owners {
			if k > 0 && nd.owners[k-1] >= o {
				return fmt.Errorf("node %d owners unsorted: %v", n, nd.owners)
			}
			if _, ok := liveSlot[o]; !ok {
				return fmt.Errorf("node %d owned by dead slot %d", n, o)
			}
			refs += 1 + int(x.slots[o].extra[n])
		}
	}
	if len(x.children)+firsts != x.used {
		return fmt.Errorf("child map has %d entries and %d nodes are first children; %d nodes in use", len(x.children), firsts, x.used)
	}
	for i := range x.nodes {
		if freed[int32(i)] {
			continue
		}
		if f := x.nodes[i].first; f != 0 && (freed[f] || x.nodes[f].parent != int32(i)) {
			return fmt.Errorf("node %d links first child %d, not its child", i, f)
		}
		if x.nodes[i].nchild != nchild[i] {
			return fmt.Errorf("node %d counts %d children, has %d", i, x.nodes[i].nchild, nchild[i])
		}
		if i != 0 && len(x.nodes[i].owners) == 0 && nchild[i] == 0 {
			return fmt.Errorf("node %d is an orphan: no owner, no child", i)
		}
	}
	if refs != x.owned {
		return fmt.Errorf("owner refs sum to %d, ownerships = %d", refs, x.owned)
	}
	entries := 0
	for s, r := range liveSlot {
		rs := &x.slots[s]
		if len(rs.blocks) > x.lim.perRank {
			return fmt.Errorf("%v holds %d blocks", r, len(rs.blocks))
		}
		entries += len(rs.blocks)
		per := map[int32]uint32{}
		for _, n := range rs.blocks {
			per[n]++
		}
		for n, c := range per {
			if n <= 0 || int(n) >= len(x.nodes) || freed[n] {
				return fmt.Errorf("%v names dead node %d", r, n)
			}
			if _, ok := findSlot(x.nodes[n].owners, s); !ok || 1+rs.extra[n] != c {
				return fmt.Errorf("%v names node %d %d times; owners %v, extra %d", r, n, c, x.nodes[n].owners, rs.extra[n])
			}
		}
		for n, k := range rs.extra {
			if k == 0 || per[n] != 1+k {
				return fmt.Errorf("%v: extra refs %d on node %d named %d times", r, k, n, per[n])
			}
		}
	}
	if entries != x.owned {
		return fmt.Errorf("rank blocks sum to %d, ownerships = %d", entries, x.owned)
	}
	return nil
}

// compareWithRef checks the index's sizes and a prompt's matches against
// the reference.
func compareWithRef(x *Index, m *refIndex, prompt []uint64, out *Matches) error {
	if x.used != len(m.prefix) || x.owned != m.owned || len(x.ranks) != len(m.ranks) {
		return fmt.Errorf("sizes: index %d nodes %d ownerships %d ranks, reference %d %d %d",
			x.used, x.owned, len(x.ranks), len(m.prefix), m.owned, len(m.ranks))
	}
	x.FindMatches(prompt, out)
	want := m.matches(prompt)
	if out.Len() != len(want) {
		return fmt.Errorf("prompt %v: %d ranks matched, want %d (%v vs %v)", prompt, out.Len(), len(want), out, want)
	}
	for i, r := range out.Ranks {
		if want[r] != out.Blocks[i] {
			return fmt.Errorf("prompt %v: %v scores %d, want %d", prompt, r, out.Blocks[i], want[r])
		}
		if i > 0 && out.Blocks[i] < out.Blocks[i-1] {
			return fmt.Errorf("scores not increasing: %v", out.Blocks)
		}
	}
	return nil
}

// gen produces random operations over small domains so that prefixes,
// tokens hashes and engine hashes collide often.
type gen struct {
	rnd    *rand.Rand
	all    []Rank
	nextID map[Rank]uint64
}

func newGen(seed uint64) *gen {
	g := &gen{rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), nextID: map[Rank]uint64{}}
	for _, ns := range []string{"a", "b"} {
		for w := uint64(1); w <= 4; w++ {
			for dp := uint32(0); dp < 2; dp++ {
				g.all = append(g.all, Rank{ns, w, dp})
			}
		}
	}
	return g
}

func (g *gen) rank() Rank { return g.all[g.rnd.IntN(len(g.all))] }

// tok draws a tokens hash from a small alphabet.
func (g *gen) tok() uint64 { return uint64(g.rnd.IntN(4)) + 100 }

// engineHash mostly derives the engine hash from the path as engines do
// (equal prefixes give equal hashes), sometimes draws a small colliding
// value (one engine hash re-pointed, or two hashes naming one node).
func (g *gen) engineHash(path string) uint64 {
	if g.rnd.IntN(8) == 0 {
		return uint64(g.rnd.IntN(6)) + 1
	}
	var h uint64 = 14695981039346656037
	for i := 0; i < len(path); i++ {
		h = (h ^ uint64(path[i])) * 1099511628211
	}
	return h
}

func (g *gen) eventID(r Rank) uint64 {
	switch k := g.rnd.IntN(20); {
	case k == 0:
		return 0 // a source without ids
	case k == 1 && g.nextID[r] > 1:
		return g.nextID[r] - 1 - uint64(g.rnd.IntN(int(g.nextID[r]-1))) // a replay
	case k == 2:
		g.nextID[r] += uint64(g.rnd.IntN(3)) + 1 // a gap
	}
	g.nextID[r]++
	return g.nextID[r]
}

// event draws an event for a rank the reference knows about (or a rank not
// live, sometimes).
func (g *gen) event(m *refIndex) (string, Event) {
	r := g.rank()
	ev := Event{WorkerID: r.WorkerID, DPRank: r.DPRank, EventID: g.eventID(r)}
	if g.rnd.IntN(30) == 0 {
		ev.Tier = Tier(1 + g.rnd.IntN(4))
	}
	var held []uint64
	if rk := m.ranks[r]; rk != nil {
		for h := range rk.blocks {
			held = append(held, h)
		}
		slices.Sort(held)
	}
	switch k := g.rnd.IntN(100); {
	case k < 60:
		ev.Kind = Stored
		base := ""
		if len(held) > 0 && g.rnd.IntN(2) == 0 {
			ev.HasParent = true
			ev.ParentHash = held[g.rnd.IntN(len(held))]
			base = m.ranks[r].blocks[ev.ParentHash]
		} else if g.rnd.IntN(15) == 0 {
			ev.HasParent, ev.ParentHash = true, g.rnd.Uint64() // not held
		}
		n := 1 + g.rnd.IntN(5)
		if g.rnd.IntN(40) == 0 {
			n = 0
		}
		path := base
		for range n {
			tok := g.tok()
			path = pathKey(path, tok)
			ev.Blocks = append(ev.Blocks, StoredBlock{BlockHash: g.engineHash(path), TokensHash: tok})
		}
	case k < 90:
		ev.Kind = Removed
		for range g.rnd.IntN(4) {
			if len(held) > 0 && g.rnd.IntN(6) != 0 {
				ev.Removed = append(ev.Removed, held[g.rnd.IntN(len(held))])
			} else {
				ev.Removed = append(ev.Removed, g.rnd.Uint64()%8)
			}
		}
	case k < 97:
		ev.Kind = Cleared
	default:
		ev.Kind = EventKind(g.rnd.IntN(2) * 9) // 0 or 9: unknown kinds
	}
	return r.Namespace, ev
}

func (g *gen) liveSet() []Rank {
	var out []Rank
	for _, r := range g.all {
		if g.rnd.IntN(5) != 0 {
			out = append(out, r)
		}
	}
	g.rnd.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	if len(out) > 0 && g.rnd.IntN(4) == 0 {
		out = append(out, out[0]) // a duplicate
	}
	return out
}

// probes are prompts along held paths (extended at random) and random ones.
func (g *gen) probes(m *refIndex) [][]uint64 {
	var paths []string
	for _, rk := range m.ranks {
		for _, p := range rk.blocks {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var out [][]uint64
	for range 6 {
		var prompt []uint64
		if len(paths) > 0 && g.rnd.IntN(4) != 0 {
			p := paths[g.rnd.IntN(len(paths))]
			for i := 0; i < len(p); i += 8 {
				prompt = append(prompt, binary.LittleEndian.Uint64([]byte(p[i:i+8])))
			}
		}
		for range g.rnd.IntN(4) {
			prompt = append(prompt, g.tok())
		}
		out = append(out, prompt)
	}
	return append(out, nil)
}

// runModel drives an index, a twin index and the reference with the same
// random operations and fails at the first difference.
func runModel(t testing.TB, seed uint64, l limits, steps int) {
	g := newGen(seed)
	x, twin, m := newIndex(l), newIndex(l), newRef(l)
	var out, twinOut Matches
	live := g.liveSet()
	x.SetLive(slices.Values(live))
	twin.SetLive(slices.Values(live))
	m.setLive(live)
	fail := func(step int, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d step %d: %s", seed, step, fmt.Sprintf(format, args...))
	}
	for step := range steps {
		switch k := g.rnd.IntN(100); {
		case k < 4:
			live := g.liveSet()
			got, want := x.SetLive(slices.Values(live)), m.setLive(live)
			twin.SetLive(slices.Values(live))
			if got != want {
				fail(step, "SetLive refused %d, want %d", got, want)
			}
		case k < 6:
			r := g.rank()
			if got, want := x.ClearRank(r), m.clearRank(r); got != want {
				fail(step, "ClearRank(%v) = %v, want %v", r, got, want)
			}
			twin.ClearRank(r)
		default:
			ns, ev := g.event(m)
			want := m.apply(ns, &ev)
			if got := x.Apply(ns, &ev); got != want {
				fail(step, "Apply(%s, %+v) = %v, want %v", ns, ev, got, want)
			}
			twin.Apply(ns, &ev)
		}
		if err := checkIndex(x); err != nil {
			fail(step, "invariant: %v", err)
		}
		for _, p := range g.probes(m) {
			if err := compareWithRef(x, m, p, &out); err != nil {
				fail(step, "%v", err)
			}
			twin.FindMatches(p, &twinOut)
			if !slices.Equal(out.Ranks, twinOut.Ranks) || !slices.Equal(out.Blocks, twinOut.Blocks) {
				fail(step, "twin index answered in another order: %v vs %v", out, twinOut)
			}
		}
	}
	// Everything removed: every node is freed.
	for r, rk := range m.ranks {
		var hs []uint64
		for h := range rk.blocks {
			hs = append(hs, h)
		}
		slices.Sort(hs)
		if len(hs) == 0 {
			continue
		}
		ev := Event{WorkerID: r.WorkerID, DPRank: r.DPRank, Kind: Removed, Removed: hs}
		if got, want := x.Apply(r.Namespace, &ev), m.apply(r.Namespace, &ev); got != want || got != Applied {
			t.Fatalf("seed %d: final removal = %v, reference %v", seed, got, want)
		}
	}
	if err := checkIndex(x); err != nil {
		t.Fatalf("seed %d after removing everything: %v", seed, err)
	}
	if x.used != 0 || x.owned != 0 || len(x.children) != 0 || x.nodes[0].first != 0 {
		t.Fatalf("seed %d: %d nodes, %d ownerships, %d child keys left after removing everything", seed, x.used, x.owned, len(x.children))
	}
	twin.SetLive(slices.Values([]Rank(nil)))
	if err := checkIndex(twin); err != nil || twin.used != 0 || twin.owned != 0 || len(twin.ranks) != 0 {
		t.Fatalf("seed %d: twin after SetLive(none): %v, %d nodes, %d ownerships", seed, err, twin.used, twin.owned)
	}
}

// small ceilings that random sequences hit often.
var smallLimits = limits{nodes: 16, perRank: 6, ownerships: 18, ownersPerNode: 3, ranks: 10}

func TestIndexAgainstReference(t *testing.T) {
	seeds, steps := 150, 400
	if testing.Short() {
		seeds, steps = 20, 200
	}
	for _, c := range []struct {
		name string
		lim  limits
	}{{"default", defaultLimits}, {"small", smallLimits}} {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(seeds) {
				runModel(t, seed+1, c.lim, steps)
			}
		})
	}
}

// The reference itself must disagree with a broken index: a mutation of
// the real one (an ownership dropped behind its back) is caught.
func TestReferenceCatchesDivergence(t *testing.T) {
	x, m := newIndex(defaultLimits), newRef(defaultLimits)
	r := Rank{"a", 1, 0}
	if err := checkIndex(x); err != nil {
		t.Fatal(err)
	}
	x.SetLive(slices.Values([]Rank{r}))
	m.setLive([]Rank{r})
	ev := Event{WorkerID: 1, Kind: Stored, Blocks: []StoredBlock{{1, 10}, {2, 11}}}
	x.Apply("a", &ev)
	m.apply("a", &ev)
	var out Matches
	if err := compareWithRef(x, m, []uint64{10, 11}, &out); err != nil {
		t.Fatal(err)
	}
	n := x.slots[0].blocks[2]
	x.nodes[n].owners = x.nodes[n].owners[:0]
	if err := checkIndex(x); err == nil {
		t.Fatal("invariant check missed a dropped owner")
	}
	if err := compareWithRef(x, m, []uint64{10, 11}, &out); err == nil {
		t.Fatal("reference comparison missed a dropped owner")
	}
}

// Many ranks holding a shared path with holes: FindMatches both steps
// through and binary-searches owner lists (a few candidates left against a
// node many ranks own), and must agree with the reference either way.
func TestFindMatchesManyRanksWithHoles(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rnd := rand.New(rand.NewPCG(seed, 7))
		x, m := newIndex(defaultLimits), newRef(defaultLimits)
		var ranks []Rank
		for w := range uint64(300) {
			ranks = append(ranks, Rank{"ns", w + 1, 0})
		}
		x.SetLive(slices.Values(ranks))
		m.setLive(ranks)
		const depth = 24
		prompt := make([]uint64, depth)
		for i := range prompt {
			prompt[i] = uint64(i) + 1000
		}
		for _, r := range ranks {
			n := 1 + rnd.IntN(depth)
			ev := Event{WorkerID: r.WorkerID, Kind: Stored}
			for i := range n {
				ev.Blocks = append(ev.Blocks, StoredBlock{BlockHash: uint64(i) + 1, TokensHash: prompt[i]})
			}
			if res := x.Apply("ns", &ev); res != Applied {
				t.Fatalf("store = %v", res)
			}
			m.apply("ns", &ev)
			// Most ranks lose an early block: few candidates survive
			// into nodes that many ranks still own.
			if rnd.IntN(10) != 0 {
				rm := Event{WorkerID: r.WorkerID, Kind: Removed, Removed: []uint64{uint64(rnd.IntN(n)) + 1}}
				x.Apply("ns", &rm)
				m.apply("ns", &rm)
			}
		}
		if err := checkIndex(x); err != nil {
			t.Fatal(err)
		}
		var out Matches
		for k := 0; k <= depth; k++ {
			if err := compareWithRef(x, m, prompt[:k], &out); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
	}
}
