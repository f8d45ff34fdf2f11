package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/picker"
)

func TestParseInboundEstimatesPrompts(t *testing.T) {
	h := picker.Heuristic{}
	in, p := parseInbound([]byte(`{"model":"m","messages":[
		{"role":"system","content":"You are terse."},
		{"role":"user","content":[{"type":"text","text":"Describe"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"this picture"}]}
	]}`), kindChat, h)
	require.Nil(t, p)
	assert.Equal(t, "m", in.model)
	assert.False(t, in.stream)
	assert.Equal(t, h.Estimate("You are terse.\nDescribe\n\nthis picture\n"), in.promptTokens)

	for prompt, want := range map[string]uint64{
		`"Once upon a time"`: h.Estimate("Once upon a time"),
		`["a b","c"]`:        h.Estimate("a b\nc"),
		`[1,2,3]`:            3,
		`[[1,2],[3,4,5]]`:    5,
	} {
		in, p := parseInbound([]byte(`{"model":"m","stream":true,"prompt":`+prompt+`}`), kindCompletion, h)
		require.Nil(t, p, prompt)
		assert.Equal(t, want, in.promptTokens, prompt)
		assert.True(t, in.stream)
	}
}

func TestTokenDataIsStripped(t *testing.T) {
	h := picker.Heuristic{}
	untouched := []byte(`{"model":"m", "nvext":{"annotations":["a"]},"prompt":"x"}`)
	in, p := parseInbound(untouched, kindCompletion, h)
	require.Nil(t, p)
	assert.Equal(t, untouched, in.body, "no token_data: the body is forwarded byte for byte")

	in, p = parseInbound([]byte(`{"model":"m","nvext":{"token_data":[1,2],"greed_sampling":true},"prompt":"<&>"}`), kindCompletion, h)
	require.Nil(t, p)
	var got map[string]any
	require.NoError(t, json.Unmarshal(in.body, &got))
	assert.Equal(t, map[string]any{"model": "m", "nvext": map[string]any{"greed_sampling": true}, "prompt": "<&>"}, got)
	assert.Contains(t, string(in.body), `"<&>"`)

	in, p = parseInbound([]byte(`{"model":"m","nvext":{"token_data":[1]},"prompt":"x"}`), kindCompletion, h)
	require.Nil(t, p)
	assert.JSONEq(t, `{"model":"m","prompt":"x"}`, string(in.body), "an emptied nvext goes")

	odd := []byte(`{"model":"m","nvext":"token_data","prompt":"x"}`)
	in, p = parseInbound(odd, kindCompletion, h)
	require.Nil(t, p)
	assert.Equal(t, odd, in.body, "a non-object nvext is the upstream's to refuse")
}

func TestParseInboundRefusals(t *testing.T) {
	for _, body := range []string{``, `[]`, `"m"`, `{"model":null}`, `{"model":""}`, `{"model":"m","stream":1}`} {
		_, p := parseInbound([]byte(body), kindChat, picker.Heuristic{})
		require.NotNil(t, p, body)
		assert.Equal(t, http.StatusBadRequest, p.status, body)
	}
	in, p := parseInbound([]byte(`{"model":"m","stream":null}`), kindChat, picker.Heuristic{})
	require.Nil(t, p)
	assert.False(t, in.stream)
}

func TestClientWorkerPinsInNvextAreStripped(t *testing.T) {
	h := picker.Heuristic{}
	in, p := parseInbound([]byte(`{"model":"m","nvext":{"prefill_worker_id":7,"decode_worker_id":8,"backend_instance_id":8,"dp_rank":1,"prefill_dp_rank":0,"annotations":["a"]},"prompt":"x"}`), kindCompletion, h)
	require.Nil(t, p)
	for _, f := range []string{"prefill_worker_id", "decode_worker_id", "backend_instance_id", "dp_rank", "prefill_dp_rank"} {
		assert.NotContains(t, string(in.body), f)
	}
	assert.Contains(t, string(in.body), `"annotations":["a"]`, "other nvext fields stay")
}

// Routing members named twice are refused, escaped spellings included:
// the gateway and the upstream could each read another one.
func TestDuplicateRoutingKeysAreRefused(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","model":"other"}`,
		`{"model":"m","mod\u0065l":"other"}`,
		`{"model":"m","stream":false,"stream":true}`,
		`{"model":"m","nvext":{},"nvext":{"backend_instance_id":7}}`,
		`{"model":"m","messages":[],"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","nvext":{"annotations":[],"annotations":["a"]}}`,
		`{"model":"m","nvext":{"dp_rank":1,"dp_r\u0061nk":2}}`,
	} {
		_, p := parseInbound([]byte(body), kindChat, picker.Heuristic{})
		require.NotNil(t, p, body)
		assert.Equal(t, http.StatusBadRequest, p.status, body)
		assert.Contains(t, p.message, "more than once", body)
	}
	// Keys routing does not read may repeat: the upstream judges them.
	_, p := parseInbound([]byte(`{"model":"m","temperature":1,"temperature":0}`), kindChat, picker.Heuristic{})
	assert.Nil(t, p)
}

// An escaped key is the same key to the upstream, so to the gateway.
func TestEscapedKeysAreRead(t *testing.T) {
	in, p := parseInbound([]byte(`{"\u006dodel":"m","str\u0065am":true,"nv\u0065xt":{"tok\u0065n_data":[1]},"prompt":"x"}`), kindCompletion, picker.Heuristic{})
	require.Nil(t, p)
	assert.Equal(t, "m", in.model)
	assert.True(t, in.stream)
	assert.NotContains(t, string(in.body), "tok")
}

// Message counts, content parts and prompt sizes are capped before any
// work is spent on them.
func TestParseInboundBounds(t *testing.T) {
	h := picker.Heuristic{}
	msgs := func(n int, msg string) string {
		return `{"model":"m","messages":[` + strings.TrimSuffix(strings.Repeat(msg+",", n), ",") + `]}`
	}
	_, p := parseInbound([]byte(msgs(maxMessages, `{}`)), kindChat, h)
	assert.Nil(t, p, "at the bound")
	_, p = parseInbound([]byte(msgs(maxMessages+1, `{}`)), kindChat, h)
	require.NotNil(t, p)
	assert.Equal(t, "messages: more than 4096 messages", p.message)

	parts := `{"role":"user","content":[` + strings.TrimSuffix(strings.Repeat(`{"type":"text","text":"a"},`, 3), ",") + `]}`
	_, p = parseInbound([]byte(msgs(maxBlocks/3+1, parts)), kindChat, h)
	require.NotNil(t, p)
	assert.Contains(t, p.message, "content parts")

	ids := `[` + strings.TrimSuffix(strings.Repeat("1,", maxPromptTokenIDs+1), ",") + `]`
	_, p = parseInbound([]byte(`{"model":"m","prompt":`+ids+`}`), kindCompletion, h)
	require.NotNil(t, p)
	assert.Contains(t, p.message, "token ids")

	strs := `[` + strings.TrimSuffix(strings.Repeat(`"a",`, maxPromptItems+1), ",") + `]`
	_, p = parseInbound([]byte(`{"model":"m","prompt":`+strs+`}`), kindCompletion, h)
	require.NotNil(t, p)
	assert.Contains(t, p.message, "prompts")

	var nv strings.Builder
	nv.WriteString(`{"a0":1`)
	for i := 1; i <= maxNvextMembers; i++ {
		fmt.Fprintf(&nv, `,"a%d":1`, i)
	}
	nv.WriteString(`}`)
	_, p = parseInbound([]byte(`{"model":"m","nvext":`+nv.String()+`}`), kindChat, h)
	require.NotNil(t, p)
	assert.Contains(t, p.message, "nvext: more than")
}

// Removing nvext fields splices the body: every other byte stays,
// wherever nvext sits among the members.
func TestNvextRemovalSplicesTheBody(t *testing.T) {
	h := picker.Heuristic{}
	for body, want := range map[string]string{
		`{"nvext":{"token_data":[1]}, "model":"m","prompt":"<a>"}`:              `{"model":"m","prompt":"<a>"}`,
		`{"model":"m" ,"nvext" : {"token_data":[1]} ,"prompt":"<a>"}`:           `{"model":"m" ,"prompt":"<a>"}`,
		`{"model":"m","prompt":"<a>","nvext":{"token_data":[1]}}`:               `{"model":"m","prompt":"<a>"}`,
		`{"model":"m","nvext":{"x":1.50, "dp_rank":0,"y":"\u00e9"},"prompt":1}`: `{"model":"m","nvext":{"x":1.50,"y":"\u00e9"},"prompt":1}`,
	} {
		in, p := parseInbound([]byte(body), kindCompletion, h)
		require.Nil(t, p, body)
		assert.Equal(t, want, string(in.body), body)
	}
}

// A body read with its declared length reads exactly what io.ReadAll
// would, whether the client declared the truth, less, or more than it
// sent, and passes on a read error.
func TestReadDeclaredReadsWhatArrives(t *testing.T) {
	for _, size := range []int{0, 1, 100, maxPresized - 1, maxPresized, maxPresized + 1, 3*maxPresized + 7} {
		data := bytes.Repeat([]byte("0123456789"), size/10+1)[:size]
		for _, declared := range []int64{-1, 0, 1, int64(size) - 1, int64(size), int64(size) + 1, 10 * maxPresized} {
			for _, wrap := range []func(io.Reader) io.Reader{
				func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader, iotest.DataErrReader,
			} {
				got, err := readDeclared(wrap(bytes.NewReader(data)), declared)
				require.NoError(t, err)
				require.Equal(t, data, got, "size %d declared %d", size, declared)
			}
		}
	}
	boom := errors.New("boom")
	got, err := readDeclared(io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom)), 10)
	require.ErrorIs(t, err, boom)
	require.Equal(t, "abc", string(got))
}

// The fast decoders of model and the output limit agree with
// json.Unmarshal on every kind of JSON value.
func TestFastDecodersAgreeWithUnmarshal(t *testing.T) {
	for _, raw := range []string{`"m"`, `""`, `"a\"b"`, `"\u00e9t\u00e9"`, "\"\xff\xfe\"", `"Qwen/Qwen3-0.6B"`, `null`, `true`,
		`12`, `-3`, `0`, `-0`, `1.5`, `1e3`, `99999999999999999999`, `[1]`, `{"a":1}`} {
		var want string
		wantOK := json.Unmarshal([]byte(raw), &want) == nil
		var got string
		require.Equal(t, wantOK, decodeString([]byte(raw), &got), raw)
		require.Equal(t, want, got, raw)

		var wantN int
		wantNOK := json.Unmarshal([]byte(raw), &wantN) == nil
		gotN, gotNOK := decodeInt([]byte(raw))
		require.Equal(t, wantNOK, gotNOK, raw)
		if wantNOK {
			require.Equal(t, wantN, gotN, raw)
		}
	}
	_, ok := decodeInt(nil)
	require.False(t, ok)
}
