package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/router/config"
	"switchyard/router/metrics"
)

func rewriteOf(globals []string, single bool) *promptRewrite {
	b := config.DefaultBackend()
	b.GlobalPrompts, b.RequiresSingleLeadingSystem = globals, single
	return newPromptRewrite(b)
}

func TestPromptRewriteExactBodies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		globals []string
		single  bool
		body    string
		want    string // "" when the body goes as it was
		result  string
	}{
		{
			name: "globals prepended in order, the rest byte for byte", globals: []string{"Be brief.", "<b>&</b>"},
			body:   `{"model":"m",  "messages" : [ {"content":"hi","role":"user"} ] ,"temperature":0.50}`,
			want:   `{"model":"m",  "messages" : [{"role":"system","content":"Be brief."},{"role":"system","content":"<b>&</b>"},{"content":"hi","role":"user"}] ,"temperature":0.50}`,
			result: metrics.RewriteRewritten,
		},
		{
			name: "globals merged with the client's system messages", globals: []string{"G1", "G2"}, single: true,
			body:   `{"messages":[{"role":"user","content":"u1"},{"role":"system","name":"ops","content":"S1"},{"role":"assistant","content":"a"},{"role":"system","content":[{"type":"text","text":"S2a"},{"type":"text","text":"S2b","cache_control":{}}]}],"model":"m"}`,
			want:   `{"messages":[{"role":"system","content":"G1\n\nG2\n\nS1\n\nS2aS2b"},{"role":"user","content":"u1"},{"role":"assistant","content":"a"}],"model":"m"}`,
			result: metrics.RewriteRewritten,
		},
		{
			name: "merged into the first system message, keeping its key order and members", single: true,
			body:   `{"model":"m","messages":[{"role":"user","content":"q"},{"name":"x","content":"one","role":"system"},{"role":"system","content":"two"}]}`,
			want:   `{"model":"m","messages":[{"name":"x","content":"one\n\ntwo","role":"system"},{"role":"user","content":"q"}]}`,
			result: metrics.RewriteRewritten,
		},
		{
			name: "a lone system message moved first", single: true,
			body:   `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"system","content":"s"}]}`,
			want:   `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}]}`,
			result: metrics.RewriteRewritten,
		},
		{
			name: "null and absent contents add no text", single: true,
			body:   `{"messages":[{"role":"system","content":null},{"role":"user","content":"q"},{"role":"system"},{"role":"system","content":"s"}]}`,
			want:   `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}]}`,
			result: metrics.RewriteRewritten,
		},
		{
			name: "escaped role and key", single: true,
			body:   `{"messages":[{"role":"user","content":"q"},{"r\u006fle":"sys\u0074em","content":"s\u00e9"}]}`,
			want:   `{"messages":[{"r\u006fle":"sys\u0074em","content":"sé"},{"role":"user","content":"q"}]}`,
			result: metrics.RewriteRewritten,
		},
		{
			name: "already one leading system message", single: true,
			body: `{"messages":[ {"role":"system","content":[{"type":"text","text":"s"}]}, {"role":"user","content":"q"}]}`,
		},
		{
			name: "no system message at all", single: true,
			body: `{"messages":[{"role":"user","content":"q"}]}`,
		},
		{
			name: "a system message with an image part", globals: []string{"G"}, single: true,
			body:   `{"messages":[{"role":"system","content":"a"},{"role":"system","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`,
			result: metrics.RewriteNonTextSystem,
		},
		{
			name: "a system message whose content is a number", single: true,
			body:   `{"messages":[{"role":"user","content":"q"},{"role":"system","content":7}]}`,
			result: metrics.RewriteNonTextSystem,
		},
		{
			name: "a message naming role twice", single: true,
			body:   `{"messages":[{"role":"user","role":"system","content":"q"}]}`,
			result: metrics.RewriteUnreadable,
		},
		{name: "no messages", globals: []string{"G"}, body: `{"model":"m","prompt":"p"}`, result: metrics.RewriteUnreadable},
		{name: "messages not an array", globals: []string{"G"}, body: `{"messages":{"role":"user"}}`, result: metrics.RewriteUnreadable},
		{name: "messages named twice", globals: []string{"G"}, body: `{"messages":[],"messages":[]}`, result: metrics.RewriteUnreadable},
		{name: "not JSON", globals: []string{"G"}, body: `{"messages":[`, result: metrics.RewriteUnreadable},
		{
			name: "empty messages get the globals", globals: []string{"G"},
			body: `{"messages":[]}`, want: `{"messages":[{"role":"system","content":"G"}]}`, result: metrics.RewriteRewritten,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, result := rewriteOf(tc.globals, tc.single).apply([]byte(tc.body))
			require.Equal(t, tc.result, result)
			want := tc.want
			if want == "" {
				want = tc.body
			}
			require.Equal(t, want, string(out))
			require.Equal(t, json.Valid([]byte(tc.body)), json.Valid(out))
		})
	}
}

func TestPromptRewriteNilAndSame(t *testing.T) {
	var none *promptRewrite
	body := []byte(`{"messages":[{"role":"system","content":"s"},{"role":"system","content":"t"}]}`)
	out, result := none.apply(body)
	require.Equal(t, string(body), string(out))
	require.Empty(t, result)
	require.Nil(t, rewriteOf(nil, false))

	require.True(t, none.same(nil))
	require.False(t, none.same(rewriteOf(nil, true)))
	require.True(t, rewriteOf([]string{"a"}, true).same(rewriteOf([]string{"a"}, true)))
	require.False(t, rewriteOf([]string{"a"}, true).same(rewriteOf([]string{"a"}, false)))
	require.False(t, rewriteOf([]string{"a"}, false).same(rewriteOf([]string{"b"}, false)))
}

func TestPromptRewriteBounds(t *testing.T) {
	rw := rewriteOf(repeatString("G", config.MaxGlobalPrompts), true)
	many := `{"messages":[` + strings.TrimSuffix(strings.Repeat(`{"role":"system","content":"s"},`, maxMessages), ",") + `]}`
	out, result := rw.apply([]byte(many))
	require.Equal(t, metrics.RewriteRewritten, result, "the ingress's whole message allowance is rewritten")
	var got struct{ Messages []map[string]string }
	require.NoError(t, json.Unmarshal(out, &got))
	require.Len(t, got.Messages, 1)
	require.Len(t, got.Messages[0]["content"], config.MaxGlobalPrompts*3+maxMessages*3-2)

	tooMany := `{"messages":[` + strings.TrimSuffix(strings.Repeat(`{},`, maxMessages+1), ",") + `]}`
	out, result = rw.apply([]byte(tooMany))
	require.Equal(t, metrics.RewriteTooManyMessages, result)
	require.Equal(t, tooMany, string(out))
}

func repeatString(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// Whatever the body, a rewrite never panics, answers valid JSON when it
// was given valid JSON, changes only the messages member, and leaves at
// most one system message, first, when it says it rewrote.
func FuzzPromptRewrite(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"system","content":"s"}]}`,
		`{"messages":[{"role":"system","content":[{"type":"text","text":"a"},{"type":"image_url"}]}]}`,
		`{"messages":[{"role":"system","content":null},{"role":"system"}],"x":[1,{"y":"z"}]}`,
		`{"messages":[1,"a",null,[],{"role":1}]}`,
		`{"messages":[],"messages":[]}`, `[]`, `{`, `{"m\u0065ssages":[{"r\u006fle":"system"}]}`,
	} {
		f.Add([]byte(s), true, uint8(2))
	}
	f.Fuzz(func(t *testing.T, body []byte, single bool, globals uint8) {
		rw := rewriteOf(repeatString("G<&>", int(globals%4)), single)
		if rw == nil {
			return
		}
		out, result := rw.apply(body)
		if result != metrics.RewriteRewritten {
			if string(out) != string(body) {
				t.Fatalf("result %q changed the body: %q", result, out)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON %q from %q", out, body)
		}
		var before, after map[string]json.RawMessage
		if json.Unmarshal(body, &before) != nil || json.Unmarshal(out, &after) != nil {
			t.Fatalf("rewrote a body that is not an object: %q", body)
		}
		for k, v := range before {
			if k != "messages" && string(after[k]) != string(v) {
				t.Fatalf("member %q changed: %s -> %s", k, v, after[k])
			}
		}
		var msgs []json.RawMessage
		if err := json.Unmarshal(after["messages"], &msgs); err != nil {
			t.Fatalf("messages: %v in %q", err, out)
		}
		if !single {
			return
		}
		for i, m := range msgs {
			if role, _, _ := roleAndContent(m); role == "system" && i > 0 {
				t.Fatalf("system message at %d in %q", i, out)
			}
		}
	})
}
