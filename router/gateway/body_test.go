package gateway

import (
	"encoding/json"
	"net/http"
	"testing"

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
