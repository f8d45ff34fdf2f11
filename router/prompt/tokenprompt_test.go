package prompt

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/router/picker"
)

// A completions prompt of token ids is hashed as given, with no tokenizer
// for the model (the engine is fed those ids as they are); a text prompt
// still needs one, and a list over the token cap is too large.
func TestTokenPromptNeedsNoTokenizer(t *testing.T) {
	c := &counts{m: map[string]int{}}
	s := New(fixedSource{why: picker.KVTokenizerUnavailable}, Limits{MaxTokens: 4}, Hooks{Result: c.add})
	ids, why := s.Tokens(context.Background(), "m", false, []byte(`{"model":"m","prompt":[1, 2, 4294967295]}`))
	require.Empty(t, why)
	require.Equal(t, []uint32{1, 2, 4294967295}, ids)

	_, why = s.Tokens(context.Background(), "m", false, []byte(`{"model":"m","prompt":"text"}`))
	require.Equal(t, picker.KVTokenizerUnavailable, why)
	_, why = s.Tokens(context.Background(), "m", false, []byte(`{"model":"m","prompt":[1,2,3,4,5]}`))
	require.Equal(t, picker.KVPromptTooLarge, why)
	_, why = s.Tokens(context.Background(), "m", true, []byte(`{"model":"m","prompt":[1,2]}`))
	require.Equal(t, picker.KVTokenizerUnavailable, why, "a chat body's prompt member is not its prompt")
	require.Equal(t, 1, c.get("ok"))
	require.Equal(t, 1, c.get(picker.KVPromptTooLarge))
}

func TestTokenPromptForms(t *testing.T) {
	for _, tc := range []struct {
		body        string
		ids         []uint32
		given, read bool
	}{
		{`{"prompt":[0,7,65535]}`, []uint32{0, 7, 65535}, true, true},
		{`{"prompt": [ 3 ] }`, []uint32{3}, true, true},
		{`{"prompt":[1,2,3,4]}`, nil, true, false}, // over the cap of 3
		{`{"prompt":[]}`, nil, false, false},
		{`{"prompt":[[1,2],[3]]}`, nil, false, false},
		{`{"prompt":[1,"a"]}`, nil, false, false},
		{`{"prompt":[1.5]}`, nil, false, false},
		{`{"prompt":[-1]}`, nil, false, false},
		{`{"prompt":[4294967296]}`, nil, false, false},
		{`{"prompt":"[1,2]"}`, nil, false, false},
		{`{"prompt":null}`, nil, false, false},
		{`{}`, nil, false, false},
		{`not json`, nil, false, false},
	} {
		ids, given, ok := TokenPrompt([]byte(tc.body), 3)
		require.Equal(t, tc.given, given, tc.body)
		require.Equal(t, tc.read, ok, tc.body)
		require.Equal(t, tc.ids, ids, tc.body)
	}
}

// FuzzTokenPrompt: no body panics, a read prompt holds at most the cap of
// ids, and it reads back from the ids written out again.
func FuzzTokenPrompt(f *testing.F) {
	for _, s := range []string{`{"prompt":[1,2,3]}`, `{"prompt":[[1]]}`, `{"prompt":[1e3]}`, `{"prompt":[` + strings.Repeat("1,", 20) + `1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		const maxTokens = 16
		ids, given, ok := TokenPrompt(body, maxTokens)
		if ok != (given && len(ids) > 0) || len(ids) > maxTokens || (!ok && ids != nil) {
			t.Fatalf("%q: ids %v given %v ok %v", body, ids, given, ok)
		}
		if !ok {
			return
		}
		again, err := json.Marshal(map[string][]uint32{"prompt": ids})
		if err != nil {
			t.Fatal(err)
		}
		back, _, ok := TokenPrompt(again, maxTokens)
		if !ok || len(back) != len(ids) {
			t.Fatalf("%q: %v does not read back (%v)", body, ids, back)
		}
	})
}
