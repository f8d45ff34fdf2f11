package msgpack

import (
	"math"
	"testing"

	vm "github.com/vmihailenco/msgpack/v5"
)

// encode uses an independent encoder so these tests check real wire forms.
func encode(t testing.TB, v any) []byte {
	b, err := vm.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestUintAcceptsEveryWidth(t *testing.T) {
	check := func(b []byte, want uint64) {
		t.Helper()
		r := NewReader(b)
		got, err := r.Uint()
		if err != nil || got != want || r.Remaining() != 0 {
			t.Fatalf("%x: got %d, %v (%d left); want %d", b, got, err, r.Remaining(), want)
		}
	}
	for _, v := range []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64} {
		check(encode(t, v), v)
		if v <= math.MaxInt64 {
			check(encode(t, int64(v)), v) // signed encodings of non-negative values
		}
	}
	// Explicitly wide forms of a small value.
	check([]byte{0xcf, 0, 0, 0, 0, 0, 0, 0, 5}, 5)
	check([]byte{0xd3, 0, 0, 0, 0, 0, 0, 0, 5}, 5)
	r := NewReader(encode(t, int64(-1)))
	if _, err := r.Uint(); err == nil {
		t.Fatal("a negative integer read as unsigned")
	}
}

func TestMapsArraysBytesAndSkip(t *testing.T) {
	doc := map[string]any{
		"s": "text", "b": []byte{1, 2, 3}, "n": nil, "f": 1.5, "f32": float32(2),
		"arr": []any{1, "x", []any{true, false}}, "m": map[string]any{"deep": map[string]any{"x": 1}},
		"neg": -5, "big": uint64(math.MaxUint64),
	}
	b := encode(t, doc)
	r := NewReader(b)
	n, err := r.MapLen()
	if err != nil || n != len(doc) {
		t.Fatalf("map len %d, %v", n, err)
	}
	seen := 0
	for i := 0; i < n; i++ {
		k, err := r.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		switch string(k) {
		case "s":
			v, err := r.Bytes()
			if err != nil || string(v) != "text" {
				t.Fatalf("s = %q %v", v, err)
			}
		case "b":
			v, err := r.Bytes()
			if err != nil || len(v) != 3 || v[2] != 3 {
				t.Fatalf("b = %v %v", v, err)
			}
		case "n":
			if !r.IsNil() {
				t.Fatal("nil not seen")
			}
		default:
			if err := r.Skip(); err != nil {
				t.Fatalf("skip %s: %v", k, err)
			}
		}
		seen++
	}
	if seen != len(doc) || r.Remaining() != 0 {
		t.Fatalf("seen %d, remaining %d", seen, r.Remaining())
	}
}

func TestHostileHeadersAreRefusedWithoutWork(t *testing.T) {
	for _, b := range [][]byte{
		{0xdf, 0xff, 0xff, 0xff, 0xff},       // map32 claiming 4G entries
		{0xdd, 0xff, 0xff, 0xff, 0xff, 0x01}, // array32 claiming 4G entries
		{0xdb, 0xff, 0xff, 0xff, 0xff},       // str32 longer than the input
		{0xc6, 0x00, 0x00, 0x10, 0x00},       // bin32 longer than the input
		{0xc9, 0xff, 0xff, 0xff, 0xff, 0x01}, // ext32 longer than the input
		{0xc1},                               // never used
		{},
	} {
		r := NewReader(b)
		if err := r.Skip(); err == nil {
			t.Errorf("%x skipped without error", b)
		}
	}
	// Nesting beyond MaxDepth.
	deep := make([]byte, 0, MaxDepth+3)
	for i := 0; i < MaxDepth+2; i++ {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0x01)
	r := NewReader(deep)
	if err := r.Skip(); err == nil {
		t.Fatal("nesting beyond MaxDepth accepted")
	}
}

func TestByteArrayIsBounded(t *testing.T) {
	r := NewReader(encode(t, []int{1, 2, 255}))
	got, err := r.ByteArray(make([]byte, 0, 3))
	if err != nil || string(got) != "\x01\x02\xff" {
		t.Fatalf("%v %v", got, err)
	}
	r = NewReader(encode(t, []int{1, 2, 3, 4}))
	if _, err := r.ByteArray(make([]byte, 0, 3)); err == nil {
		t.Fatal("array longer than its bound accepted")
	}
	r = NewReader(encode(t, []int{256}))
	if _, err := r.ByteArray(make([]byte, 0, 3)); err == nil {
		t.Fatal("a value over 255 accepted as a byte")
	}
}

func FuzzSkip(f *testing.F) {
	f.Add(encode(f, map[string]any{"a": []any{1, "b", nil, 2.5}}))
	f.Add([]byte{0xdf, 0, 0, 0, 1, 0xa1, 'k', 0xc0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(b)
		for r.Remaining() > 0 {
			before := r.Remaining()
			if err := r.Skip(); err != nil {
				return
			}
			if r.Remaining() >= before {
				t.Fatal("Skip made no progress")
			}
		}
	})
}
