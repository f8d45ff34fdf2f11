package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
)

// decoderValue is the reference the one-pass reader must agree with:
// encoding/json's token stream, numbers kept as written, objects in the
// order written (a repeated key keeps its first place and its last value).
func decoderValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			var items []jinja.Value
			for dec.More() {
				v, err := decoderValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		}
		obj := jinja.NewDict()
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return jinja.Undefined(), err
			}
			v, err := decoderValue(dec)
			if err != nil {
				return jinja.Undefined(), err
			}
			obj.AsDict().Set(key.(string), v)
		}
		_, err := dec.Token()
		return obj, err
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		return number(t)
	case bool:
		return jinja.NewBool(t), nil
	}
	return jinja.None(), nil
}

// dump spells a value with its kinds, dict key order and list lengths.
func dump(v jinja.Value) string {
	switch {
	case v.IsDict():
		d := v.AsDict()
		var b strings.Builder
		b.WriteString("{")
		for _, k := range d.OrderedKeys() {
			e, _ := d.Get(k)
			fmt.Fprintf(&b, "%q:%s,", k, dump(e))
		}
		return b.String() + "}"
	case v.IsList():
		l := v.AsList()
		var b strings.Builder
		b.WriteString("[")
		for i := range l.Len() {
			b.WriteString(dump(l.Get(i)) + ",")
		}
		return b.String() + "]"
	case v.IsString():
		return "s" + strconv.Quote(v.AsString())
	case v.IsInt():
		return "i" + strconv.FormatInt(v.AsInt(), 10)
	case v.IsFloat():
		return "f" + strconv.FormatFloat(v.AsFloat(), 'g', -1, 64)
	case v.IsBool():
		return "b" + strconv.FormatBool(v.AsBool())
	case v.IsNone():
		return "none"
	}
	return "?"
}

// The one-pass reader converts exactly what encoding/json's decoder
// reads, and refuses exactly what it refuses.
func FuzzConvertMatchesDecoder(f *testing.F) {
	for _, s := range []string{
		`[{"role":"user","content":"hi"}]`,
		` [ {"b" : 1 , "a" : [true,false,null], "b": 2.5e3} ] `,
		`{"z":"\u00e9\ud83d\ude00\n\"q\"","y":-0,"x":1E400,"w":"\xff\xfe","v":"\ud800"}`,
		`[[],{},[{}],"",0,-12.5,9223372036854775807]`,
		`[9223372036854775808]`,
		`[1,]`, `{"a" 1}`, `[1] x`, `"open`, ``, `nul`,
		`{"a":{"b":{"c":{"d":[[[[1]]]]}}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c := converter{maxDepth: 6}
		got, gotErr := c.convert(raw, "f")

		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		want, wantErr := decoderValue(dec)
		if wantErr == nil {
			if _, extra := dec.Token(); !errors.Is(extra, io.EOF) {
				wantErr = errors.New("data after the JSON value")
			}
		}
		if wantErr != nil {
			if gotErr == nil {
				t.Fatalf("%q: converted, the decoder refuses it: %v", raw, wantErr)
			}
			return
		}
		if gotErr != nil {
			if errors.Is(gotErr, ErrLimit) {
				return // the depth bound, which the reference does not apply
			}
			t.Fatalf("%q: refused (%v), the decoder reads it", raw, gotErr)
		}
		if dump(got) != dump(want) {
			t.Fatalf("%q:\n got %s\nwant %s", raw, dump(got), dump(want))
		}
	})
}

// The converter's bounds and errors: depth past the limit, and invalid
// JSON named with the field.
func TestConvertRefusals(t *testing.T) {
	c := converter{maxDepth: 2}
	_, err := c.convert([]byte(`[[[1]]]`), "messages")
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "messages: ") {
		t.Fatalf("too deep: %v", err)
	}
	for _, raw := range []string{`[1,]`, `[1] [2]`, `{"a":`} {
		_, err := c.convert([]byte(raw), "tools")
		if !errors.Is(err, ErrInput) || !strings.HasPrefix(err.Error(), ErrInput.Error()+": tools: ") {
			t.Fatalf("%s: %v", raw, err)
		}
	}
	if _, err := c.convert([]byte(`[18446744073709551616]`), "messages"); !errors.Is(err, ErrInput) {
		t.Fatalf("integer past 64 bits: %v", err)
	}
}
