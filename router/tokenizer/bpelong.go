package tokenizer

import "math/bits"

// mergeByRankQueues takes the merges of a long word in the same order as
// mergeByHeap — lowest rank first, then leftmost — from one queue of
// positions per rank instead of one heap of every candidate.
//
// A long word is where a client can make BPE expensive: 64 KiB of one
// letter or of spaces is one word of 65,536 symbols. Such a word holds many
// candidates but few distinct ranks, and the candidates of one rank arrive
// mostly left to right (each pass of a rank over the word creates the next
// rank's pairs in order). So a queue per rank is mostly a FIFO, and only the
// small heap of ranks and the rare out-of-order position pay a logarithm.
func (m *bpeModel) mergeByRankQueues(syms []symbol, q *rankQueues) {
	q.reset()
	for i := range syms {
		if rank := m.pairOf(syms, int32(i)); rank != noPair {
			q.push(rank, int32(i))
		}
	}
	for {
		rank, pos, ok := q.pop()
		if !ok {
			return
		}
		if !isCurrent(syms, pos, rank) {
			continue
		}
		prev, at := m.mergeAt(syms, pos)
		if prev >= 0 && syms[prev].pairRank != noPair {
			q.push(syms[prev].pairRank, prev)
		}
		if syms[at].pairRank != noPair {
			q.push(syms[at].pairRank, at)
		}
	}
}

// rankQueues holds the candidates of one word: a queue of positions per
// rank, and a heap of the ranks whose queue may hold any. Popping takes the
// lowest rank's leftmost position: the order of candidateHeap.
type rankQueues struct {
	queues []rankQueue
	index  rankIndex
	// ranks holds rank<<32 | queue index for every queue marked queued.
	ranks candidateHeap
}

// rankQueue is the positions of one rank: those pushed in increasing order
// in a FIFO, any other in a small heap. Its lowest position is the lower of
// the two fronts.
type rankQueue struct {
	fifo   []int32
	head   int
	late   candidateHeap // positions, as candidates of rank 0
	queued bool          // whether ranks holds this queue
}

// reset empties the queues for the next word, keeping their memory.
func (q *rankQueues) reset() {
	q.queues = q.queues[:0]
	q.index.reset()
	q.ranks = q.ranks[:0]
}

func (q *rankQueues) push(rank uint32, pos int32) {
	i := q.index.queueOf(rank, q)
	rq := &q.queues[i]
	if !rq.queued {
		rq.queued = true
		q.ranks.push(newCandidate(rank, i))
	}
	rq.add(pos)
}

// pop returns the lowest rank's leftmost position; ok is false when no
// candidate is left.
func (q *rankQueues) pop() (rank uint32, pos int32, ok bool) {
	for len(q.ranks) > 0 {
		top := q.ranks[0]
		rq := &q.queues[top.pos()]
		if pos, ok := rq.take(); ok {
			return top.rank(), pos, true
		}
		q.ranks.pop()
		rq.queued = false
	}
	return 0, 0, false
}

// newQueue appends an empty queue, reusing the memory of a previous word's.
func (q *rankQueues) newQueue() int32 {
	n := len(q.queues)
	if n < cap(q.queues) {
		q.queues = q.queues[:n+1]
		old := &q.queues[n]
		*old = rankQueue{fifo: old.fifo[:0], late: old.late[:0]}
	} else {
		q.queues = append(q.queues, rankQueue{})
	}
	return int32(n)
}

func (r *rankQueue) add(pos int32) {
	if n := len(r.fifo); n > r.head && pos < r.fifo[n-1] {
		r.late.push(candidate(uint32(pos)))
		return
	}
	r.fifo = append(r.fifo, pos)
}

func (r *rankQueue) take() (int32, bool) {
	inFIFO := r.head < len(r.fifo)
	if len(r.late) > 0 && (!inFIFO || r.late[0].pos() < r.fifo[r.head]) {
		return r.late.pop().pos(), true
	}
	if !inFIFO {
		return 0, false
	}
	pos := r.fifo[r.head]
	r.head++
	if r.head == len(r.fifo) {
		r.fifo, r.head = r.fifo[:0], 0
	}
	return pos, true
}

// rankIndex maps a rank to its queue: open addressing with linear probing,
// at most half full. Each slot used is remembered so reset costs what the
// last word used, not the table's size.
type rankIndex struct {
	slots []rankSlot
	shift uint
	used  []int32
}

// rankSlot holds rank+1 (0 marks a free slot) and its queue.
type rankSlot struct {
	key   uint32
	queue int32
}

const minRankSlots = 64

func (x *rankIndex) reset() {
	if len(x.slots) == 0 {
		x.slots = make([]rankSlot, minRankSlots)
		x.shift = uint(32 - bits.TrailingZeros(minRankSlots))
	}
	for _, i := range x.used {
		x.slots[i] = rankSlot{}
	}
	x.used = x.used[:0]
}

// queueOf returns rank's queue, creating it in q when the word has none.
func (x *rankIndex) queueOf(rank uint32, q *rankQueues) int32 {
	key := rank + 1
	mask := len(x.slots) - 1
	i := x.slot(key)
	for ; x.slots[i].key != 0; i = (i + 1) & mask {
		if x.slots[i].key == key {
			return x.slots[i].queue
		}
	}
	queue := q.newQueue()
	x.slots[i] = rankSlot{key: key, queue: queue}
	x.used = append(x.used, int32(i))
	if 2*len(x.used) > len(x.slots) {
		x.grow()
	}
	return queue
}

func (x *rankIndex) slot(key uint32) int { return int((key * 0x9E3779B1) >> x.shift) }

// grow doubles the table and places every key again.
func (x *rankIndex) grow() {
	old := x.slots
	x.slots = make([]rankSlot, 2*len(old))
	x.shift--
	x.used = x.used[:0]
	mask := len(x.slots) - 1
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := x.slot(s.key)
		for x.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		x.slots[i] = s
		x.used = append(x.used, int32(i))
	}
}
