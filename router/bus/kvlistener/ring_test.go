package kvlistener

import (
	"fmt"
	"testing"
)

func frame(id uint64) []byte { return fmt.Appendf(nil, "e%d.", id) }

func ids(frames [][]byte) string {
	s := ""
	for _, f := range frames {
		s += string(f)
	}
	return s
}

func TestRingResumesAndResets(t *testing.T) {
	r := NewRing(3, 1<<20, 10)
	out, lost, _, next := r.After(nil, nil)
	if len(out) != 0 || lost || next != 9 {
		t.Fatalf("empty ring: %q %v %d", ids(out), lost, next)
	}
	for range 4 {
		r.Push(frame) // ids 10..13; 10 evicted by the count bound
	}
	cur := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		cursor   *uint64
		want     string
		lost     bool
		resetID  uint64
		wantNext uint64
	}{
		{nil, "e11.e12.e13.", false, 0, 13},
		{cur(10), "e11.e12.e13.", false, 0, 13}, // the oldest's predecessor: nothing lost
		{cur(12), "e13.", false, 0, 13},
		{cur(13), "", false, 0, 13},              // caught up
		{cur(9), "e11.e12.e13.", true, 10, 13},   // 10 was evicted
		{cur(500), "e11.e12.e13.", true, 10, 13}, // another run's id
	} {
		out, lost, resetID, next := r.After(nil, tc.cursor)
		if ids(out) != tc.want || lost != tc.lost || (lost && resetID != tc.resetID) || next != tc.wantNext {
			t.Errorf("after %v: got %q lost=%v reset=%d next=%d", tc.cursor, ids(out), lost, resetID, next)
		}
	}
}

func TestRingByteBound(t *testing.T) {
	r := NewRing(100, 10, 1)
	for range 5 {
		r.Push(frame) // 3 bytes each: at most three fit in 10
	}
	if r.Len() != 3 || r.Bytes() != 9 {
		t.Fatalf("len %d bytes %d, want 3 and 9", r.Len(), r.Bytes())
	}
	// An event above the byte bound empties the ring; a consumer before
	// it sees a reset.
	id, evicted, ok := r.Push(func(uint64) []byte { return make([]byte, 11) })
	if ok || evicted != 3 || r.Len() != 0 || r.Bytes() != 0 {
		t.Fatalf("oversized push: ok=%v evicted=%d len=%d", ok, evicted, r.Len())
	}
	last := id - 1
	if _, lost, resetID, _ := r.After(nil, &last); !lost || resetID != id {
		t.Fatalf("want a reset at %d, got lost=%v id=%d", id, lost, resetID)
	}
}
