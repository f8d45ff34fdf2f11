package jsonvalid

import (
	"encoding/json"
	"strings"
	"testing"
)

// cases are inputs at the edges of the grammar; each must get
// encoding/json.Valid's answer, which the test also states.
var cases = []struct {
	in    string
	valid bool
}{
	{``, false},
	{` `, false},
	{`0`, true},
	{` 0 `, true},
	{`-0`, true},
	{`-`, false},
	{`01`, false},
	{`1.`, false},
	{`.1`, false},
	{`1.5e`, false},
	{`1.5e+`, false},
	{`1.5E-07`, true},
	{`1e5`, true},
	{`+1`, false},
	{`true`, true},
	{`tru`, false},
	{`truex`, false},
	{`null`, true},
	{`nul`, false},
	{`false`, true},
	{`""`, true},
	{`"`, false},
	{`"\"`, false},
	{`"\\"`, true},
	{`"\/\b\f\n\r\t"`, true},
	{`"\x"`, false},
	{`"\u00e9"`, true},
	{`"\u00E"`, false},
	{`"\u00eg"`, false},
	{"\"tab\there\"", false},
	{"\"\x7f\"", true},
	{"\"\xff\xfe\"", true}, // not UTF-8, accepted as encoding/json does
	{`{}`, true},
	{`{ }`, true},
	{`[]`, true},
	{`[ ]`, true},
	{`[1,]`, false},
	{`[,1]`, false},
	{`[1 2]`, false},
	{`[1,2]`, true},
	{`{"a":1,}`, false},
	{`{"a"}`, false},
	{`{"a":}`, false},
	{`{a:1}`, false},
	{`{"a":1 "b":2}`, false},
	{`{"a" : [ {"b": [ ]}, null , "x" ] , "c" : {} }`, true},
	{`{"a":1}}`, false},
	{`[1]]`, false},
	{`[1}`, false},
	{`{"a":1]`, false},
	{`[{]`, false},
	{`{} {}`, false},
	{"[1]\n", true},
	{"\t{\"k\":\r\n-1.25e+3}", true},
}

func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, tc := range cases {
		if std := json.Valid([]byte(tc.in)); std != tc.valid {
			t.Fatalf("the table is wrong for %q: encoding/json says %v", tc.in, std)
		}
		if got := Valid([]byte(tc.in)); got != tc.valid {
			t.Errorf("Valid(%q) = %v, want %v", tc.in, got, tc.valid)
		}
	}
}

func TestValidDepth(t *testing.T) {
	for _, tc := range []struct {
		name  string
		depth int
	}{{"at the bound", MaxDepth}, {"past it", MaxDepth + 1}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, in := range []string{
				strings.Repeat("[", tc.depth) + strings.Repeat("]", tc.depth),
				strings.Repeat(`{"a":`, tc.depth-1) + "{}" + strings.Repeat("}", tc.depth-1),
				strings.Repeat(`[{"k":`, tc.depth/2) + "0" + strings.Repeat("}]", tc.depth/2),
			} {
				want := json.Valid([]byte(in))
				if got := Valid([]byte(in)); got != want {
					t.Errorf("depth %d (%.12s…): Valid = %v, encoding/json %v", tc.depth, in, got, want)
				}
			}
		})
	}
	// The two answers differ at the bound, so the test above can fail.
	if !Valid([]byte(strings.Repeat("[", MaxDepth)+strings.Repeat("]", MaxDepth))) ||
		Valid([]byte(strings.Repeat("[", MaxDepth+1)+strings.Repeat("]", MaxDepth+1))) {
		t.Error("the depth bound is not MaxDepth")
	}
}

func TestValidDoesNotAllocate(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi \u00e9"}],"max_tokens":1,"stream":true}`)
	if n := testing.AllocsPerRun(100, func() { Valid(body) }); n != 0 {
		t.Errorf("Valid allocated %v times per call", n)
	}
}

func FuzzValid(f *testing.F) {
	for _, tc := range cases {
		f.Add([]byte(tc.in))
	}
	f.Add([]byte(chatBody))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json %v", b, got, want)
		}
	})
}

const chatBody = `{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"user","content":"Say ok in one word, please."}],"max_tokens":1}`

// BenchmarkValid compares Valid with encoding/json.Valid on a short chat
// request and on one of 600 turns.
func BenchmarkValid(b *testing.B) {
	long := `{"model":"m","messages":[` + strings.Repeat(`{"role":"user","content":"The quick brown fox jumps over the lazy dog, \u00e9, and \"more\" text."},`, 600) + `{"role":"user","content":"x"}],"temperature":0.7}`
	for _, body := range []struct{ name, text string }{{"short", chatBody}, {"600_turns", long}} {
		in := []byte(body.text)
		b.Run(body.name+"/jsonvalid", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if !Valid(in) {
					b.Fatal("invalid")
				}
			}
		})
		b.Run(body.name+"/encoding_json", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if !json.Valid(in) {
					b.Fatal("invalid")
				}
			}
		})
	}
}
