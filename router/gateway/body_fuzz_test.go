package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/router/picker"
)

// FuzzParseInbound checks the one-pass request reader against
// encoding/json: an accepted body is a JSON object whose model and stream
// are what encoding/json reads, and the body forwarded is the client's
// minus the forbidden nvext fields (byte for byte when none was there).
//
//	go test -run '^$' -fuzz FuzzParseInbound ./router/gateway/
func FuzzParseInbound(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"},{"content":[{"type":"text","text":"a\nb"}]}]}`,
		`{"model":"m","prompt":[[1,2],[3]],"max_tokens":5,"nvext":{"token_data":[1],"annotations":["a"]}}`,
		`{"nvext":{"dp_rank":0},"model":"m","prompt":["a","b"]}`,
		`{"m\u006fdel":"m","nvext":{"dp_r\u0061nk":0}}`,
		`{"model":"m","model":"n"}`,
		`{"model":"m","messages":[{"content":"\ud83d\ude00 \"q\""}],"prompt":-1e9}`,
		`[]`, `null`, `{"model":7}`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, k := range []kind{kindChat, kindCompletion} {
			in, p := parseInbound(body, k, picker.Heuristic{})
			if p != nil {
				require.Equal(t, http.StatusBadRequest, p.status)
				return
			}
			var ref map[string]any
			require.NoError(t, json.Unmarshal(body, &ref), "accepted bodies are JSON objects")
			require.Equal(t, ref["model"], in.model)
			require.Equal(t, ref["stream"] == true, in.stream)

			want, removed := withoutForbiddenNvext(ref)
			if !removed {
				require.Equal(t, body, in.body, "forwarded byte for byte")
				continue
			}
			var got map[string]any
			require.NoError(t, json.Unmarshal(in.body, &got), "the spliced body is JSON: %s", in.body)
			require.Equal(t, want, got)
		}
	})
}

// withoutForbiddenNvext is a decoded body as the gateway should forward it.
func withoutForbiddenNvext(body map[string]any) (map[string]any, bool) {
	nv, ok := body["nvext"].(map[string]any)
	if !ok {
		return body, false
	}
	removed := false
	for k := range nv {
		if slices.Contains(clientForbiddenNvext, k) {
			delete(nv, k)
			removed = true
		}
	}
	if removed && len(nv) == 0 {
		delete(body, "nvext")
	}
	return body, removed
}
