package prompt

import (
	"encoding/json"
	"testing"

	"switchyard/router/prompt/template"
)

// arrayLen counts, in the fields a chat body renders, what decoding them
// into []json.RawMessage would hold, and refuses what that refuses.
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
		in, err := template.InputFromChatRequest(body)
		if err != nil {
			return
		}
		for _, field := range []json.RawMessage{in.Messages, in.Tools} {
			n, errCounted := arrayLen(field)
			var decoded []json.RawMessage
			errDecoded := error(nil)
			if len(field) > 0 {
				errDecoded = json.Unmarshal(field, &decoded)
			}
			if (errCounted == nil) != (errDecoded == nil) {
				t.Fatalf("%q: counting says %v, decoding %v", field, errCounted, errDecoded)
			}
			if errDecoded == nil && n != len(decoded) {
				t.Fatalf("%q: counted %d, decoded %d", field, n, len(decoded))
			}
		}
	})
}
