package h1

import (
	"strconv"
	"testing"
	"unsafe"
)

// The interner hands back the kept string for a value it has seen, and
// stops keeping new ones at its bounds: a peer sending ever new values
// cannot grow it.
func TestInternerKeepsRepeatsWithinItsBounds(t *testing.T) {
	var in Interner
	first := in.Intern([]byte("application/json"))
	again := in.Intern([]byte("application/json"))
	if first != again || unsafe.StringData(first) != unsafe.StringData(again) {
		t.Fatalf("a repeated value was not the kept string")
	}
	for i := range 100 {
		v := "v" + strconv.Itoa(i)
		if got := in.Intern([]byte(v)); got != v {
			t.Fatalf("Intern(%q) = %q", v, got)
		}
	}
	if len(in.values) != maxInterned {
		t.Fatalf("kept %d values, want the bound %d", len(in.values), maxInterned)
	}
	long := make([]byte, maxInternedValueLen+1)
	for i := range long {
		long[i] = 'x'
	}
	var fresh Interner
	if got := fresh.Intern(long); got != string(long) || len(fresh.values) != 0 {
		t.Fatalf("a value longer than %d bytes was kept", maxInternedValueLen)
	}
	if a := testing.AllocsPerRun(100, func() { _ = in.Intern([]byte("application/json")) }); a != 0 {
		t.Fatalf("a kept value cost %v allocations", a)
	}
}
