package config

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// fieldAt is the configuration field a dotted YAML path names (invalid
// when none does).
func fieldAt(c *Config, path string) reflect.Value {
	v := reflect.ValueOf(c).Elem()
	for _, name := range strings.Split(path, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}
		}
		next := reflect.Value{}
		for i := range v.NumField() {
			if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ","); tag == name {
				next = v.Field(i)
				break
			}
		}
		if !next.IsValid() {
			return next
		}
		v = next
	}
	return v
}

// FuzzApplyEPPVariables sets one DYN_* variable to any value: no panic; a
// refused value is an error naming the variable and leaves the field as
// it was; an accepted one is reported against the field's path and lands
// in that field as the variable's text says (trimmed, then read as the
// field's type).
func FuzzApplyEPPVariables(f *testing.F) {
	for i := range EPPVariables {
		for _, seed := range []string{"", "true", " 1 ", "0", "16", "-3", "0.5", "1e309", "NaN", "dynamo", "x\x00y"} {
			f.Add(uint8(i), seed)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, raw string) {
		v := EPPVariables[int(which)%len(EPPVariables)]
		c := Default()
		field := fieldAt(c, v.Path)
		if !field.IsValid() {
			t.Fatalf("%s names %s, which is no configuration field", v.Name, v.Path)
		}
		before := field.Interface()
		from, err := ApplyEPPVariables(c, func(name string) (string, bool) { return raw, name == v.Name })
		if err != nil {
			if !strings.Contains(err.Error(), v.Name) {
				t.Fatalf("the error %q does not name %s", err, v.Name)
			}
			if !reflect.DeepEqual(field.Interface(), before) {
				t.Fatalf("a refused %s changed %s from %v to %v", v.Name, v.Path, before, field.Interface())
			}
			return
		}
		if len(from) != 1 || from[v.Path] != v.Name {
			t.Fatalf("applied %v, want only %s from %s", from, v.Path, v.Name)
		}
		text := strings.TrimSpace(raw)
		var want any
		switch field.Kind() {
		case reflect.String:
			want = text
		case reflect.Int:
			n, err := strconv.Atoi(text)
			if err != nil {
				t.Fatalf("%s accepted %q as an integer", v.Name, raw)
			}
			want = n
		case reflect.Float64:
			x, err := strconv.ParseFloat(text, 64)
			if err != nil || x != x || x > 1e300 || x < -1e300 {
				t.Fatalf("%s accepted %q as a finite number", v.Name, raw)
			}
			want = x
		case reflect.Bool:
			switch strings.ToLower(text) {
			case "true", "1":
				want = true
			case "false", "0":
				want = false
			default:
				t.Fatalf("%s accepted %q as a boolean", v.Name, raw)
			}
		default:
			t.Fatalf("%s sets %s, of a kind the test does not know (%s)", v.Name, v.Path, field.Kind())
		}
		if got := field.Interface(); got != want {
			t.Fatalf("%s=%q set %s to %v, want %v", v.Name, raw, v.Path, got, want)
		}
	})
}
