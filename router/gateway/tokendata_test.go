package gateway

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func tokenDataOf(t testing.TB, body []byte) ([]uint32, map[string]json.RawMessage) {
	t.Helper()
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &top), string(body))
	var nv struct {
		TokenData []uint32 `json:"token_data"`
	}
	require.NoError(t, json.Unmarshal(top["nvext"], &nv), string(body))
	return nv.TokenData, top
}

func TestWithTokenData(t *testing.T) {
	ids := []uint32{1, 22, 4294967295}
	for _, tc := range []struct{ name, body string }{
		{"no nvext", `{"model":"m","messages":[]}`},
		{"empty body", `{}`},
		{"spaced", " \n{ \"model\" : \"m\" } "},
		{"empty nvext", `{"model":"m","nvext":{}}`},
		{"nvext with members", `{"model":"m","nvext":{"annotations":["a"]},"stream":true}`},
		{"nvext spaced", `{"nvext" :  { "x" : 1 } }`},
		{"escaped key", `{"nv\u0065xt":{"y":2},"model":"m"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := withTokenData([]byte(tc.body), ids)
			got, top := tokenDataOf(t, out)
			require.Equal(t, ids, got)
			var before map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(tc.body), &before))
			for k, v := range before {
				if k == "nvext" {
					continue
				}
				require.JSONEq(t, string(v), string(top[k]), k)
			}
		})
	}
	odd := []byte(`{"nvext":null,"model":"m"}`)
	require.Equal(t, odd, withTokenData(odd, ids), "no second nvext beside one that is not an object")
	out := withTokenData([]byte(`{"nvext":{"x":1}}`), nil)
	got, _ := tokenDataOf(t, out)
	require.Empty(t, got)
}

// Whatever object the inbound parser accepted, the result is valid JSON
// carrying the ids.
func FuzzWithTokenData(f *testing.F) {
	for _, s := range []string{`{}`, `{"nvext":{}}`, `{"a":1,"nvext":{"b":[1,2]}}`, `{"nvext":null}`, `{"nvext":[1]}`} {
		f.Add([]byte(s), uint32(7))
	}
	f.Fuzz(func(t *testing.T, body []byte, id uint32) {
		if _, p := scanInbound(body); p != nil {
			return
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(body, &top) != nil {
			return
		}
		out := withTokenData(body, []uint32{id})
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %q from %q", out, body)
		}
		if nv, ok := top["nvext"]; ok && !bytes.HasPrefix(bytes.TrimSpace(nv), []byte("{")) {
			if string(out) != string(body) {
				t.Fatalf("changed a body whose nvext is not an object: %q", out)
			}
			return
		}
		got, _ := tokenDataOf(t, out)
		if len(got) != 1 || got[0] != id {
			t.Fatalf("token_data %v in %q", got, out)
		}
	})
}
