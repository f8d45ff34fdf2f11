package gateway

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"switchyard/router/picker"
)

// Fuzz targets for the converters, which read what clients and backends
// send. Each checks, besides not panicking, that the output is well
// formed: a chat body the chat path accepts, or an event stream in the
// dialect's order. Run one with, e.g.:
//
//	go test -run '^$' -fuzz FuzzAnthropicToChat ./router/gateway/

var anthropicSeeds = []string{
	`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","max_tokens":8,"system":[{"type":"text","text":"s"}],"stream":true,"stop_sequences":["x"],"metadata":{"user_id":"u"},
	  "tools":[{"name":"t","description":"d","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"t"},
	  "messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]},
	  {"role":"assistant","content":[{"type":"text","text":"b"},{"type":"tool_use","id":"c","name":"t","input":{"k":[1,2]}}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":[{"type":"text","text":"r"}]}]}]}`,
	`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":"r"}]}]}`,
	`{"model":"m","max_tokens":1e400,"messages":[]}`,
	`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[[[[[[[[]]]]]]]]}]}`,
	`{"model":"","max_tokens":-1,"messages":null,"system":7}`,
	`[]`, `null`, `{`, ``,
}

var responsesSeeds = []string{
	`{"model":"m","input":"hi"}`,
	`{"model":"m","instructions":"s","max_output_tokens":9,"temperature":0.5,"stream":true,"input":[
	  {"role":"developer","content":"d"},{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"data:image/png;base64,AA=="}]},
	  {"role":"assistant","content":[{"type":"output_text","text":"b"},{"type":"refusal","refusal":"no"}]}]}`,
	`{"model":"m","input":[{"type":"function_call"}],"tools":[]}`,
	`{"model":"m","input":"x","text":{"format":{"type":"text"}}}`,
	`{"model":"m","input":[{"role":"user","content":[{}]}]}`,
	`{"model":"m"}`, `{}`, `[`, ``,
}

func FuzzAnthropicToChat(f *testing.F) {
	for _, s := range anthropicSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := anthropicToChat(body)
		if err != nil {
			var re *requestError
			require.ErrorAs(t, err, &re, "every refusal is the client's 400")
			return
		}
		checkChatBody(t, body, c.body, c.model)
		require.Equal(t, c.stream, bytes.Contains(c.body, []byte(`"stream":true`)))
	})
}

func FuzzResponsesToChat(f *testing.F) {
	for _, s := range responsesSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out, err := responsesToChat(body)
		if err != nil {
			var re *requestError
			require.ErrorAs(t, err, &re)
			return
		}
		var m struct{ Model string }
		require.NoError(t, json.Unmarshal(out, &m))
		checkChatBody(t, body, out, m.Model)
	})
}

// checkChatBody holds a converted body to what the chat path needs, and
// its size to a small multiple of the input's (no amplification).
func checkChatBody(t *testing.T, in, out []byte, model string) {
	in2, p := parseInbound(out, kindChat, picker.Heuristic{})
	require.Nil(t, p, "%s", out)
	require.Equal(t, model, in2.model)
	require.LessOrEqual(t, len(out), 4*len(in)+1024)
	var body struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(out, &body))
	for _, m := range body.Messages {
		require.Contains(t, []string{"system", "user", "assistant", "tool"}, m.Role)
	}
}

// streamSeeds are upstream chat streams: text, tool calls in fragments,
// usage, errors, truncation and junk.
var streamSeeds = []string{
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n" +
		"data: [DONE]\n\n",
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"length\"}]}\n\n",
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"x\"}}\n\n",
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"cut",
	": ping\n\nevent: x\ndata: [DONE]\n\n",
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":{\"obj\":true}}}]}}]}\r\n\r\n",
	"",
}

// feed splits data into events the way pumpStream does (a small hold
// limit, so fragments occur) and runs the sink to the end.
func feed(sink streamSink, data []byte, send sendFunc) error {
	const hold = 256
	var ev []byte
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i+1], data[i+1:]
		} else {
			data = nil
		}
		ev = append(ev, line...)
		switch {
		case line[len(line)-1] == '\n' && isBlankLine(line):
			if err := sink.event(send, ev, false); err != nil {
				return err
			}
			ev = ev[:0]
		case len(ev) > hold:
			if err := sink.event(send, ev, true); err != nil {
				return err
			}
			ev = ev[:0]
		}
	}
	if len(ev) > 0 {
		if err := sink.event(send, ev, true); err != nil {
			return err
		}
	}
	return sink.end(send)
}

func FuzzAnthropicStream(f *testing.F) {
	for _, s := range streamSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		err := feed(newAnthropicStream(&anthropicChat{model: "m", stops: []string{"x"}}), data, func(p []byte) error { out.Write(p); return nil })
		require.True(t, err == nil || err == errStreamFailed, "%v", err)
		checkAnthropicEvents(t, parseSSE(t, out.Bytes()), err == nil)
	})
}

// checkAnthropicEvents holds a stream to Anthropic's order: message_start
// first; blocks opened with consecutive indices, one at a time, deltas
// only to the open block and of its kind; message_delta then
// message_stop to end, or an error event last.
func checkAnthropicEvents(t *testing.T, evs []sse, clean bool) {
	require.NotEmpty(t, evs)
	open, next, kind := -1, 0, ""
	for i, e := range evs {
		d := dataOf(t, e)
		require.Equal(t, e.name, d["type"])
		last := i == len(evs)-1
		switch e.name {
		case "error":
			require.True(t, last && !clean, "an error ends a failed stream")
			continue
		case "message_start":
			require.Zero(t, i)
			continue
		}
		require.Positive(t, i, "message_start comes first")
		switch e.name {
		case "content_block_start":
			require.Equal(t, -1, open)
			require.Equal(t, float64(next), d["index"])
			open, next = next, next+1
			kind = d["content_block"].(map[string]any)["type"].(string)
		case "content_block_delta":
			require.Equal(t, float64(open), d["index"])
			want := map[string]string{"text": "text_delta", "tool_use": "input_json_delta"}[kind]
			require.Equal(t, want, d["delta"].(map[string]any)["type"])
		case "content_block_stop":
			require.Equal(t, float64(open), d["index"])
			open = -1
		case "message_delta":
			require.Equal(t, -1, open)
			require.Equal(t, "message_stop", evs[i+1].name)
		case "message_stop":
			require.True(t, last && clean)
		default:
			t.Fatalf("unknown event %q", e.name)
		}
	}
}

func FuzzResponsesStream(f *testing.F) {
	for _, s := range streamSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		err := feed(newResponsesStream("m", newManualClock().Now()), data, func(p []byte) error { out.Write(p); return nil })
		require.True(t, err == nil || err == errStreamFailed, "%v", err)
		checkResponsesEvents(t, parseSSE(t, out.Bytes()), err == nil)
	})
}

// checkResponsesEvents holds a stream to the Responses order: numbered
// from 0, created first, the deltas adding up to the done text, and a
// terminal event (or an error) last.
func checkResponsesEvents(t *testing.T, evs []sse, clean bool) {
	require.NotEmpty(t, evs)
	var text strings.Builder
	allowed := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done"}
	for i, e := range evs {
		d := dataOf(t, e)
		require.Equal(t, e.name, d["type"])
		require.Equal(t, float64(i), d["sequence_number"])
		last := i == len(evs)-1
		switch e.name {
		case "error":
			require.True(t, last && !clean)
		case "response.completed", "response.incomplete":
			require.True(t, last && clean)
		case "response.output_text.delta":
			text.WriteString(d["delta"].(string))
		case "response.output_text.done":
			require.Equal(t, text.String(), d["text"])
		default:
			require.Contains(t, allowed, e.name)
			if i == 0 {
				require.Equal(t, "response.created", e.name)
			}
		}
	}
	if clean {
		require.True(t, slices.Contains([]string{"response.completed", "response.incomplete"}, evs[len(evs)-1].name))
	}
}
