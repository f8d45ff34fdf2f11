package prompt

import (
	"encoding/json"
	"testing"
)

// arrayLen counts what decoding into []json.RawMessage would hold, and
// refuses what it refuses.
func FuzzArrayLenMatchesDecoding(f *testing.F) {
	for _, s := range []string{
		`{"messages":[]}`, `{"messages":[ ]}`, `{"messages":null}`, `{}`,
		`{"messages":[{"role":"user","content":"a, [b] {c}"},{"content":"\"],"}],"tools":[1,[2,3],{"a":[4]}]}`,
		`{"messages":"text"}`, `{"messages":{"a":1}}`, `{"messages":[1,2,3]`, `{"Messages":[1],"TOOLS":[[]]}`,
		`{"messages":["\\\\",",",""]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var counted struct {
			Messages arrayLen `json:"messages"`
			Tools    arrayLen `json:"tools"`
		}
		var decoded struct {
			Messages []json.RawMessage `json:"messages"`
			Tools    []json.RawMessage `json:"tools"`
		}
		errCounted, errDecoded := json.Unmarshal(body, &counted), json.Unmarshal(body, &decoded)
		if (errCounted == nil) != (errDecoded == nil) {
			t.Fatalf("%q: counting says %v, decoding %v", body, errCounted, errDecoded)
		}
		if errDecoded == nil && (int(counted.Messages) != len(decoded.Messages) || int(counted.Tools) != len(decoded.Tools)) {
			t.Fatalf("%q: counted %d/%d, decoded %d/%d", body, counted.Messages, counted.Tools, len(decoded.Messages), len(decoded.Tools))
		}
	})
}
