package main

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// byteLevel is GPT-2's bytes_to_unicode table, the alphabet byte-level
// tokenizer.json files spell their vocabulary in: printable Latin-1 bytes
// stand for themselves, every other byte for the code points from U+0100
// on, in byte order.
var byteLevel = func() [256]rune {
	var table [256]rune
	next := rune(256)
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			table[b] = rune(b)
			continue
		}
		table[b] = next
		next++
	}
	return table
}()

func toByteLevel(raw string) string {
	out := make([]rune, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		out = append(out, byteLevel[raw[i]])
	}
	return string(out)
}

// The special tokens, with ids after the vocabulary in this order. The
// template's headers and the first one are what a Llama-3-style chat
// renders; the post-processor adds the first.
var specialTokens = []string{
	"<|begin_of_text|>",
	"<|end_of_text|>",
	"<|start_header_id|>",
	"<|end_header_id|>",
	"<|eot_id|>",
}

const (
	bosToken = "<|begin_of_text|>"
	eosToken = "<|eot_id|>"
)

// The tokenizer.json document, its fields in the order Hugging Face's
// library writes them.
type tokenizerFile struct {
	Version       string          `json:"version"`
	Truncation    *struct{}       `json:"truncation"`
	Padding       *struct{}       `json:"padding"`
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    *struct{}       `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         bpeModel        `json:"model"`
}

type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type bpeModel struct {
	Type                    string    `json:"type"`
	Dropout                 *float64  `json:"dropout"`
	UnkToken                *string   `json:"unk_token"`
	ContinuingSubwordPrefix *string   `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string   `json:"end_of_word_suffix"`
	FuseUnk                 bool      `json:"fuse_unk"`
	ByteFallback            bool      `json:"byte_fallback"`
	IgnoreMerges            bool      `json:"ignore_merges"`
	Vocab                   vocabJSON `json:"vocab"`
	Merges                  []string  `json:"merges"`
}

// vocabJSON writes the vocabulary in id order (a Go map would be sorted
// by key), so the file reads like the library's own.
type vocabJSON []string

func (v vocabJSON) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for id, key := range v {
		if id > 0 {
			b.WriteByte(',')
		}
		k, err := marshalNoEscape(key)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(id))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

const preTokenizerJSON = `{"type": "Sequence", "pretokenizers": [
	{"type": "Split", "pattern": {"Regex": ` + "%s" + `}, "behavior": "Isolated", "invert": false},
	{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}`

const decoderJSON = `{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}`

// tokenizerJSON builds the whole document from the trained tokens and
// merges.
func tokenizerJSON(t *trainer) ([]byte, error) {
	f := tokenizerFile{
		Version: "1.0",
		Model: bpeModel{
			Type:         "BPE",
			IgnoreMerges: true,
			Vocab:        make(vocabJSON, len(t.tokens)),
			Merges:       make([]string, len(t.merges)),
		},
	}
	for id, tok := range t.tokens {
		f.Model.Vocab[id] = toByteLevel(tok)
	}
	for i, m := range t.merges {
		f.Model.Merges[i] = toByteLevel(t.tokens[m.left]) + " " + toByteLevel(t.tokens[m.right])
	}
	for i, s := range specialTokens {
		f.AddedTokens = append(f.AddedTokens, addedToken{ID: len(t.tokens) + i, Content: s, Special: true})
	}
	var err error
	if f.PreTokenizer, err = preTokenizer(); err != nil {
		return nil, err
	}
	if f.PostProcessor, err = postProcessor(len(t.tokens)); err != nil {
		return nil, err
	}
	f.Decoder = json.RawMessage(decoderJSON)
	return marshalIndented(f)
}

func preTokenizer() (json.RawMessage, error) {
	pattern, err := marshalNoEscape(llama3Pattern)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.Replace([]byte(preTokenizerJSON), []byte("%s"), pattern, 1)), nil
}

// postProcessor adds the first special token in front of a single
// sequence (and of each of a pair, which this project never encodes), as
// Llama-3's does; bosID is its id.
func postProcessor(bosID int) (json.RawMessage, error) {
	type piece map[string]map[string]any
	special := piece{"SpecialToken": {"id": bosToken, "type_id": 0}}
	seq := func(id string, typeID int) piece { return piece{"Sequence": {"id": id, "type_id": typeID}} }
	return marshalNoEscape(map[string]any{
		"type": "Sequence",
		"processors": []any{
			map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
			map[string]any{
				"type":   "TemplateProcessing",
				"single": []piece{special, seq("A", 0)},
				"pair":   []piece{special, seq("A", 0), special, seq("B", 1)},
				"special_tokens": map[string]any{
					bosToken: map[string]any{"id": bosToken, "ids": []int{bosID}, "tokens": []string{bosToken}},
				},
			},
		},
	})
}

// tokenizerConfig is the tokenizer_config.json beside it: the chat
// template and the tokens a serving engine needs to render and stop.
type tokenizerConfig struct {
	AddedTokensDecoder map[string]addedTokenConfig `json:"added_tokens_decoder"`
	BOSToken           string                      `json:"bos_token"`
	ChatTemplate       string                      `json:"chat_template"`
	CleanUpSpaces      bool                        `json:"clean_up_tokenization_spaces"`
	EOSToken           string                      `json:"eos_token"`
	ModelMaxLength     int                         `json:"model_max_length"`
	TokenizerClass     string                      `json:"tokenizer_class"`
}

type addedTokenConfig struct {
	Content    string `json:"content"`
	LStrip     bool   `json:"lstrip"`
	Normalized bool   `json:"normalized"`
	RStrip     bool   `json:"rstrip"`
	SingleWord bool   `json:"single_word"`
	Special    bool   `json:"special"`
}

func tokenizerConfigJSON(vocabSize int, chatTemplate string) ([]byte, error) {
	c := tokenizerConfig{
		AddedTokensDecoder: map[string]addedTokenConfig{},
		BOSToken:           bosToken,
		ChatTemplate:       chatTemplate,
		EOSToken:           eosToken,
		ModelMaxLength:     131072,
		TokenizerClass:     "PreTrainedTokenizerFast",
	}
	for i, s := range specialTokens {
		c.AddedTokensDecoder[strconv.Itoa(vocabSize+i)] = addedTokenConfig{Content: s, Special: true}
	}
	return marshalIndented(c)
}

// marshalNoEscape writes JSON without escaping <, > and &: the special
// tokens stay readable.
func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func marshalIndented(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
