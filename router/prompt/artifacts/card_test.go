package artifacts

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	sumA = "blake3:62bc124be974d3a25db05bedc99422660c26715e5bbda0b37d14bd84a0c65ab2"
	sumB = "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
)

func TestSumMatchesTheBLAKE3TestVector(t *testing.T) {
	// The published BLAKE3 hash of the empty input.
	assert.Equal(t, Checksum(sumB), Sum(nil))
}

func TestParseChecksum(t *testing.T) {
	_, err := ParseChecksum(sumA)
	require.NoError(t, err)
	for _, bad := range []string{"", "blake3:abc", strings.ToUpper(sumA), "sha256:" + sumA[7:], sumA + "0", sumA[:70] + "g"} {
		_, err := ParseChecksum(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseCardSlots(t *testing.T) {
	card := `{"display_name":"Qwen/Qwen3-0.6B","tokenizer":{"hf_tokenizer_json":{"path":"/models/qwen/tokenizer.json","checksum":"` + sumA + `","size":11422654}},
	"prompt_formatter":{"hf_tokenizer_config_json":{"path":"https://worker-0:9090/v1/mdc/tokenizer_config.json","checksum":"` + sumB + `"}},
	"chat_template_file":{"hf_chat_template_jinja":{"is_custom":true,"file":{"path":"hf://Qwen/Qwen3-0.6B/chat_template.jinja@abc123","checksum":"` + sumA + `","size":null}}},
	"model_info":{"hf_config_json":{"path":"/x/config.json","checksum":"blake3:abc"}}}`
	got, err := ParseCard([]byte(card))
	require.NoError(t, err)
	require.NotNil(t, got.Tokenizer)
	assert.Equal(t, Artifact{Kind: KindHFTokenizerJSON, File: CheckedFile{Path: "/models/qwen/tokenizer.json", Checksum: sumA, Size: 11422654, HasSize: true}}, *got.Tokenizer)
	assert.Equal(t, Artifact{Kind: KindHFTokenizerConfigJSON, File: CheckedFile{Path: "https://worker-0:9090/v1/mdc/tokenizer_config.json", Checksum: sumB}}, *got.PromptFormatter,
		"a legacy card without size parses")
	assert.Equal(t, Artifact{Kind: KindHFChatTemplate, IsCustom: true, File: CheckedFile{Path: "hf://Qwen/Qwen3-0.6B/chat_template.jinja@abc123", Checksum: sumA}}, *got.ChatTemplateFile,
		"hf_chat_template_jinja is an alias of hf_chat_template")
}

func TestParseCardEmptySlots(t *testing.T) {
	for _, card := range []string{`{}`, `{"tokenizer":null,"prompt_formatter":null}`, `{"display_name":"m","runtime_config":{"x":[1,2,{"tokenizer":1}]}}`} {
		got, err := ParseCard([]byte(card))
		require.NoError(t, err, card)
		assert.Equal(t, CardArtifacts{}, got, card)
	}
}

func TestParseCardTemplateJSON(t *testing.T) {
	got, err := ParseCard([]byte(`{"prompt_formatter":{"hf_chat_template_json":{"is_custom":false,"file":{"path":"file:///m/chat_template.json","checksum":"` + sumA + `"}}}}`))
	require.NoError(t, err)
	assert.Equal(t, KindHFChatTemplateJSON, got.PromptFormatter.Kind)
	assert.Equal(t, "file:///m/chat_template.json", got.PromptFormatter.File.Path)
}

func TestParseCardRefusals(t *testing.T) {
	okFile := `{"path":"/m/t.json","checksum":"` + sumA + `"}`
	cases := []struct {
		name, card string
		result     Result
		where, msg string
	}{
		{"not an object", `[1]`, ResultRefused, "card", "not a JSON object"},
		{"truncated", `{"tokenizer":`, ResultRefused, "card", "malformed"},
		{"trailing data", `{} {}`, ResultRefused, "card", "trailing"},
		{"slot twice", `{"tokenizer":null,"tokenizer":null}`, ResultRefused, "tokenizer", "twice"},
		{"tiktoken", `{"tokenizer":{"tik_token_model":` + okFile + `}}`, ResultUnsupported, "tokenizer", "tik_token_model"},
		{"unknown tokenizer kind", `{"tokenizer":{"sentencepiece":` + okFile + `}}`, ResultUnsupported, "tokenizer", "sentencepiece"},
		{"unknown formatter kind", `{"prompt_formatter":{"mystery":` + okFile + `}}`, ResultUnsupported, "prompt_formatter", "mystery"},
		{"two variants", `{"tokenizer":{"hf_tokenizer_json":` + okFile + `,"tik_token_model":` + okFile + `}}`, ResultRefused, "tokenizer", "more than one"},
		{"no variant", `{"tokenizer":{}}`, ResultRefused, "tokenizer", "no variant"},
		{"variant is a string", `{"tokenizer":"hf_tokenizer_json"}`, ResultRefused, "tokenizer", "one variant key"},
		{"file not an object", `{"tokenizer":{"hf_tokenizer_json":"/m/t.json"}}`, ResultRefused, "tokenizer", "not an object"},
		{"no checksum", `{"tokenizer":{"hf_tokenizer_json":{"path":"/m/t.json"}}}`, ResultRefused, "tokenizer", "both path and checksum"},
		{"short checksum", `{"tokenizer":{"hf_tokenizer_json":{"path":"/m/t.json","checksum":"blake3:abc"}}}`, ResultRefused, "tokenizer", "64 lowercase hex"},
		{"negative size", `{"tokenizer":{"hf_tokenizer_json":{"path":"/m/t.json","checksum":"` + sumA + `","size":-1}}}`, ResultRefused, "tokenizer", "not an object"},
		{"declared too large", `{"tokenizer":{"hf_tokenizer_json":{"path":"/m/t.json","checksum":"` + sumA + `","size":67108865}}}`, ResultTooLarge, "tokenizer", "67108865"},
		{"relative path", `{"tokenizer":{"hf_tokenizer_json":{"path":"t.json","checksum":"` + sumA + `"}}}`, ResultRefused, "tokenizer", "absolute"},
		{"ftp", `{"tokenizer":{"hf_tokenizer_json":{"path":"ftp://h/t.json","checksum":"` + sumA + `"}}}`, ResultUnsupported, "tokenizer", "ftp"},
		{"credentials", `{"tokenizer":{"hf_tokenizer_json":{"path":"http://u:p@h/t.json","checksum":"` + sumA + `"}}}`, ResultRefused, "tokenizer", "credentials"},
		{"control character", `{"tokenizer":{"hf_tokenizer_json":{"path":"/m/t\n.json","checksum":"` + sumA + `"}}}`, ResultRefused, "tokenizer", "control"},
		{"path too long", `{"tokenizer":{"hf_tokenizer_json":{"path":"/` + strings.Repeat("a", MaxPathBytes) + `","checksum":"` + sumA + `"}}}`, ResultRefused, "tokenizer", "limit 4096"},
		{"template without file", `{"chat_template_file":{"hf_chat_template":{"is_custom":false}}}`, ResultRefused, "chat_template_file", "not an object"},
		{"template is_custom not bool", `{"chat_template_file":{"hf_chat_template":{"is_custom":"yes","file":` + okFile + `}}}`, ResultRefused, "chat_template_file", "is_custom"},
		{"hf without path", `{"prompt_formatter":{"hf_tokenizer_config_json":{"path":"hf://Qwen/Qwen3","checksum":"` + sumA + `"}}}`, ResultRefused, "prompt_formatter", "hf://<owner>/<repo>/<path>"},
		{"hf dot-dot", `{"prompt_formatter":{"hf_tokenizer_config_json":{"path":"hf://Qwen/Qwen3/../x","checksum":"` + sumA + `"}}}`, ResultRefused, "prompt_formatter", "'..'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseCard([]byte(c.card))
			var e *Error
			require.True(t, errors.As(err, &e), "want an *Error, got %v", err)
			assert.Equal(t, c.result, e.Result)
			assert.Equal(t, c.where, e.Where)
			assert.Contains(t, err.Error(), c.msg)
		})
	}
}

func TestParseCardRefusesOversizedCards(t *testing.T) {
	card := `{"pad":"` + strings.Repeat("x", MaxCardBytes) + `"}`
	_, err := ParseCard([]byte(card))
	assert.Equal(t, ResultTooLarge, ResultOf(err))
}

func TestParseCardKeepsSlotsBeforeTheFirstRefusal(t *testing.T) {
	got, err := ParseCard([]byte(`{"tokenizer":{"hf_tokenizer_json":{"path":"/t","checksum":"` + sumA + `"}},"prompt_formatter":{"x":1}}`))
	require.Error(t, err)
	require.NotNil(t, got.Tokenizer)
	assert.Nil(t, got.PromptFormatter)
}

// FuzzParseCard: any bytes give slots or an *Error with a result from the
// closed set, never a panic, and every slot returned is within the bounds.
func FuzzParseCard(f *testing.F) {
	okFile := `{"path":"/m/t.json","checksum":"` + sumA + `","size":10}`
	f.Add([]byte(`{"tokenizer":{"hf_tokenizer_json":` + okFile + `},"prompt_formatter":{"hf_chat_template":{"is_custom":false,"file":` + okFile + `}}}`))
	f.Add([]byte(`{"chat_template_file":{"hf_chat_template_json":{"is_custom":true,"file":{"path":"hf://a/b/c@r","checksum":"` + sumB + `"}}}}`))
	f.Add([]byte(`{"tokenizer":{"tik_token_model":` + okFile + `}}`))
	f.Add([]byte(`{"tokenizer":null,"tokenizer":null}`))
	f.Add([]byte(`{"prompt_formatter":{"hf_tokenizer_config_json":{"path":"http://h:1/x","checksum":"` + sumA + `","size":99999999999}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := ParseCard(raw)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
			known := false
			for _, r := range Results {
				known = known || r == e.Result
			}
			if !known {
				t.Fatalf("result %q outside the closed set", e.Result)
			}
		}
		for _, a := range []*Artifact{got.Tokenizer, got.PromptFormatter, got.ChatTemplateFile} {
			if a == nil {
				continue
			}
			if len(a.File.Path) == 0 || len(a.File.Path) > MaxPathBytes || a.File.Size > MaxArtifactBytes {
				t.Fatalf("slot outside the bounds: %+v", a)
			}
			if _, err := ParseChecksum(string(a.File.Checksum)); err != nil {
				t.Fatalf("slot with a malformed checksum: %v", err)
			}
		}
	})
}
