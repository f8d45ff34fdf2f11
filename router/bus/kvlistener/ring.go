package kvlistener

// Ring holds the latest events of one backend, already framed as SSE,
// bounded by a count and a byte total; the oldest go first. Ids increase
// by one per event. Not safe for concurrent use: Backend locks it.
type Ring struct {
	maxEvents int
	maxBytes  int64

	buf   []ringEntry // circular, len maxEvents
	head  int         // index of the oldest
	n     int
	bytes int64
	next  uint64 // id of the next event
}

type ringEntry struct {
	id  uint64
	sse []byte
}

// NewRing holds at most maxEvents events and maxBytes bytes of them; the
// first event gets firstID.
func NewRing(maxEvents int, maxBytes int64, firstID uint64) *Ring {
	return &Ring{maxEvents: maxEvents, maxBytes: maxBytes, buf: make([]ringEntry, maxEvents), next: firstID}
}

// NextID is the id the next event gets.
func (r *Ring) NextID() uint64 { return r.next }

// Len and Bytes are what the ring holds.
func (r *Ring) Len() int       { return r.n }
func (r *Ring) Bytes() int64   { return r.bytes }
func (r *Ring) oldest() uint64 { return r.buf[r.head].id }

// Push appends an event framed by frame(id) and returns its id and how
// many old events it evicted. An event larger than the byte bound is not
// kept (ok false); its id is still used, so consumers see a reset.
func (r *Ring) Push(frame func(id uint64) []byte) (id uint64, evicted int, ok bool) {
	id = r.next
	r.next++
	sse := frame(id)
	if int64(len(sse)) > r.maxBytes {
		evicted = r.n
		r.head, r.n, r.bytes = 0, 0, 0
		clear(r.buf)
		return id, evicted, false
	}
	for r.n > 0 && (r.n == r.maxEvents || r.bytes+int64(len(sse)) > r.maxBytes) {
		r.bytes -= int64(len(r.buf[r.head].sse))
		r.buf[r.head] = ringEntry{}
		r.head = (r.head + 1) % r.maxEvents
		r.n--
		evicted++
	}
	r.buf[(r.head+r.n)%r.maxEvents] = ringEntry{id: id, sse: sse}
	r.n++
	r.bytes += int64(len(sse))
	return id, evicted, true
}

// After appends to dst the framed events following cursor (nil: every
// event held). When the events right after cursor are no longer held, or
// cursor is no id of this ring's, lost is true and resetID is the id a
// reset must carry (the one before the oldest held); the events returned
// then follow it. next is the cursor after the returned events.
func (r *Ring) After(dst [][]byte, cursor *uint64) (out [][]byte, lost bool, resetID, next uint64) {
	start := r.next - uint64(r.n) // oldest held, or next when empty
	from := start
	if cursor != nil {
		c := *cursor
		if c+1 < start || c >= r.next {
			lost, resetID = true, start-1
		} else {
			from = c + 1
		}
	}
	for id := from; id < r.next; id++ {
		dst = append(dst, r.buf[(r.head+int(id-start))%r.maxEvents].sse)
	}
	return dst, lost, resetID, r.next - 1
}
