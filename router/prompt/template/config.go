package template

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"switchyard/router/jsonvalid"
)

// MaxConfigBytes bounds a tokenizer_config.json, the size cap of a model card's artifacts.
const MaxConfigBytes = 64 << 20

// Templates are the chat templates of one tokenizer: one unnamed template, or the named ones of
// tokenizer_config.json's list form.
type Templates struct {
	single *Template
	named  map[string]*Template
}

// For picks the template a request renders with, as transformers does: the only one; or, of named
// templates, "tool_use" when the request has tools (an empty list counts) and "default" otherwise or
// when there is no "tool_use".
func (ts *Templates) For(in Input) (*Template, error) {
	if ts.single != nil {
		return ts.single, nil
	}
	if hasValue(in.Tools) {
		if t, ok := ts.named["tool_use"]; ok {
			return t, nil
		}
	}
	if t, ok := ts.named["default"]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("%w: the tokenizer has several chat templates and none named \"default\"", ErrInput)
}

// Named returns the template of that name in the list form, or nil.
func (ts *Templates) Named(name string) *Template { return ts.named[name] }

func hasValue(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// tokenizerConfig holds the fields of tokenizer_config.json a chat render reads.
type tokenizerConfig struct {
	ChatTemplate            json.RawMessage   `json:"chat_template"`
	BOSToken                json.RawMessage   `json:"bos_token"`
	EOSToken                json.RawMessage   `json:"eos_token"`
	UNKToken                json.RawMessage   `json:"unk_token"`
	SEPToken                json.RawMessage   `json:"sep_token"`
	PADToken                json.RawMessage   `json:"pad_token"`
	CLSToken                json.RawMessage   `json:"cls_token"`
	MaskToken               json.RawMessage   `json:"mask_token"`
	AdditionalSpecialTokens []json.RawMessage `json:"additional_special_tokens"`
}

type namedTemplate struct {
	Name     string `json:"name"`
	Template string `json:"template"`
}

// FromTokenizerConfig parses the chat_template of a Hugging Face tokenizer_config.json (a string, or
// a list of {"name", "template"}) and passes its special tokens to every render, as transformers
// passes the tokenizer's special_tokens_map. opts.SpecialTokens, if set, are replaced.
func FromTokenizerConfig(data []byte, opts Options) (*Templates, error) {
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("%w: tokenizer_config.json is %d bytes, over the limit of %d", ErrTooLarge, len(data), MaxConfigBytes)
	}
	var cfg tokenizerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%w: tokenizer_config.json: %v", ErrInput, err)
	}
	if err := cfg.specialTokens(&opts); err != nil {
		return nil, err
	}
	return parseChatTemplateField(cfg.ChatTemplate, opts)
}

func parseChatTemplateField(raw json.RawMessage, opts Options) (*Templates, error) {
	if !hasValue(raw) {
		return nil, fmt.Errorf("%w: tokenizer_config.json has no chat_template", ErrInput)
	}
	var src string
	if err := json.Unmarshal(raw, &src); err == nil {
		t, err := Parse(src, opts)
		if err != nil {
			return nil, err
		}
		return &Templates{single: t}, nil
	}
	var list []namedTemplate
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%w: chat_template is neither a string nor a list of named templates", ErrInput)
	}
	ts := &Templates{named: make(map[string]*Template, len(list))}
	for _, nt := range list {
		if _, dup := ts.named[nt.Name]; dup {
			return nil, fmt.Errorf("%w: chat_template names %q twice", ErrInput, nt.Name)
		}
		t, err := Parse(nt.Template, opts)
		if err != nil {
			return nil, fmt.Errorf("chat template %q: %w", nt.Name, err)
		}
		ts.named[nt.Name] = t
	}
	return ts, nil
}

func (cfg *tokenizerConfig) specialTokens(opts *Options) error {
	opts.SpecialTokens = map[string]string{}
	for name, raw := range map[string]json.RawMessage{
		"bos_token": cfg.BOSToken, "eos_token": cfg.EOSToken, "unk_token": cfg.UNKToken, "sep_token": cfg.SEPToken,
		"pad_token": cfg.PADToken, "cls_token": cfg.CLSToken, "mask_token": cfg.MaskToken,
	} {
		token, ok, err := tokenContent(raw)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrInput, name, err)
		}
		if ok {
			opts.SpecialTokens[name] = token
		}
	}
	opts.AdditionalSpecialTokens = nil
	for i, raw := range cfg.AdditionalSpecialTokens {
		token, ok, err := tokenContent(raw)
		if err != nil || !ok {
			return fmt.Errorf("%w: additional_special_tokens[%d] is not a token", ErrInput, i)
		}
		opts.AdditionalSpecialTokens = append(opts.AdditionalSpecialTokens, token)
	}
	return nil
}

// tokenContent reads a special token written as a string or as a serialized AddedToken
// ({"content": ...}); null means the tokenizer has none, and transformers then passes nothing.
func tokenContent(raw json.RawMessage) (string, bool, error) {
	if !hasValue(raw) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true, nil
	}
	var added struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &added); err != nil || added.Content == nil {
		return "", false, fmt.Errorf("neither a string nor an object with a content string")
	}
	return *added.Content, true, nil
}

// ParseFile parses a plain chat_template.jinja file, which transformers reads as UTF-8 text.
func ParseFile(data []byte, opts Options) (*Template, error) {
	if len(data) > opts.Limits.withDefaults().MaxSourceBytes {
		return nil, fmt.Errorf("%w: template file is %d bytes, over the limit of %d", ErrTooLarge, len(data), opts.Limits.withDefaults().MaxSourceBytes)
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: template file is not UTF-8", ErrSyntax)
	}
	return Parse(string(data), opts)
}

// InputFromChatRequest takes a render's Input from an OpenAI chat completions body, with the
// extensions vLLM and Dynamo's frontend accept: add_generation_prompt (true when absent),
// chat_template_kwargs and documents. Messages are passed as the client wrote them.
//
// Keys match exactly, as the frontends' decoders match them: encoding/json's case-insensitive
// match would render "MESSAGES" in a body that also carries "messages", so the router would hash
// one conversation while the backend serves the other. Of repeated keys the last counts.
func InputFromChatRequest(body []byte) (Input, error) {
	if !jsonvalid.Valid(body) {
		return Input{}, fmt.Errorf("%w: chat request: not valid JSON", ErrInput)
	}
	in := Input{AddGenerationPrompt: true}
	r := jsonReader{b: body}
	if r.next() != '{' {
		return Input{}, fmt.Errorf("%w: chat request: not a JSON object", ErrInput)
	}
	r.i++
	for b := r.next(); b != '}' && b != 0; b = r.next() {
		if b == ',' {
			r.i++
			r.next()
		}
		ks, ke := r.skip()
		key := body[ks+1 : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			_ = json.Unmarshal(body[ks:ke], &k) // valid JSON: cannot fail
			key = []byte(k)
		}
		r.next()
		r.i++ // the colon
		r.next()
		vs, ve := r.skip()
		v := body[vs:ve]
		switch string(key) {
		case "messages":
			in.Messages = bytes.Clone(v)
		case "tools":
			in.Tools = bytes.Clone(v)
		case "documents":
			in.Documents = bytes.Clone(v)
		case "chat_template_kwargs":
			in.Kwargs = bytes.Clone(v)
		case "add_generation_prompt":
			switch string(v) {
			case "true", "null":
				in.AddGenerationPrompt = true
			case "false":
				in.AddGenerationPrompt = false
			default:
				return Input{}, fmt.Errorf("%w: chat request: add_generation_prompt is %.32s, not a boolean", ErrInput, v)
			}
		}
	}
	return in, nil
}
