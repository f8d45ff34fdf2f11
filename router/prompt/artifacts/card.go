package artifacts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds on card input. A card arrives from etcd or Kubernetes, written by
// whoever can register a worker.
const (
	// MaxCardBytes matches the discovery reducer's retained-card ceiling.
	MaxCardBytes = 1 << 20
	// MaxPathBytes caps a CheckedFile path or URL.
	MaxPathBytes = 4096
	// MaxArtifactBytes caps one artifact's size, declared or read.
	MaxArtifactBytes = 64 << 20
)

// Slots of a model card that name artifacts the router may load.
const (
	SlotTokenizer        = "tokenizer"
	SlotPromptFormatter  = "prompt_formatter"
	SlotChatTemplateFile = "chat_template_file"
)

// Kind is the variant tag of a slot (Dynamo's TokenizerKind and
// PromptFormatterArtifact, externally tagged in JSON).
type Kind string

// Variants the router knows. KindTikTokenModel is recognised only to be
// refused as unsupported.
const (
	KindHFTokenizerJSON       Kind = "hf_tokenizer_json"
	KindTikTokenModel         Kind = "tik_token_model"
	KindHFTokenizerConfigJSON Kind = "hf_tokenizer_config_json"
	// KindHFChatTemplate is a Jinja file; "hf_chat_template_jinja" is
	// read as an alias of it.
	KindHFChatTemplate     Kind = "hf_chat_template"
	KindHFChatTemplateJSON Kind = "hf_chat_template_json"
)

const kindHFChatTemplateJinjaAlias = "hf_chat_template_jinja"

// CheckedFile is a card's reference to one file: where it is and what it
// must hash to.
type CheckedFile struct {
	Path     string
	Checksum Checksum
	// Size is the declared size; legacy cards omit it (HasSize false).
	Size    uint64
	HasSize bool
}

// Artifact is one filled slot of a card.
type Artifact struct {
	Kind Kind
	// IsCustom is the template variants' is_custom flag: the worker was
	// given a template other than the model's own.
	IsCustom bool
	File     CheckedFile
}

// CardArtifacts are the artifact slots of one card; nil where the card
// leaves a slot empty.
type CardArtifacts struct {
	Tokenizer        *Artifact
	PromptFormatter  *Artifact
	ChatTemplateFile *Artifact
}

type checkedFileWire struct {
	Path     *string `json:"path"`
	Checksum *string `json:"checksum"`
	Size     *uint64 `json:"size"`
}

type templateWire struct {
	IsCustom bool            `json:"is_custom"`
	File     json.RawMessage `json:"file"`
}

// ParseCard reads the artifact slots of a model card. Other fields are
// skipped without being kept. A slot it cannot use is an *Error naming the
// slot and the reason (refused, unsupported or too_large); the first such
// slot, in the order tokenizer, prompt_formatter, chat_template_file, is
// returned, and the slots parsed before it are filled in.
func ParseCard(raw []byte) (CardArtifacts, error) {
	var out CardArtifacts
	if len(raw) > MaxCardBytes {
		return out, refusal(ResultTooLarge, "card", "%d bytes, limit %d", len(raw), MaxCardBytes)
	}
	slots, err := cardSlots(raw)
	if err != nil {
		return out, err
	}
	if out.Tokenizer, err = parseTokenizerSlot(slots[0]); err != nil {
		return out, err
	}
	if out.PromptFormatter, err = parseFormatterSlot(SlotPromptFormatter, slots[1]); err != nil {
		return out, err
	}
	out.ChatTemplateFile, err = parseFormatterSlot(SlotChatTemplateFile, slots[2])
	return out, err
}

// cardSlots walks the card's top-level object once and returns the raw
// values of the three slots (nil when absent). A repeated slot is refused:
// serde refuses duplicate fields, and two values would leave it unclear
// which one the worker itself read.
func cardSlots(raw []byte) ([3]json.RawMessage, error) {
	var slots [3]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := expectDelim(dec, '{'); err != nil {
		return slots, refusal(ResultRefused, "card", "not a JSON object")
	}
	for dec.More() {
		key, err := objectKey(dec)
		if err != nil {
			return slots, refusal(ResultRefused, "card", "malformed JSON")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return slots, refusal(ResultRefused, "card", "malformed JSON")
		}
		i := slotIndex(key)
		if i < 0 {
			continue
		}
		if slots[i] != nil {
			return slots, refusal(ResultRefused, key, "slot appears twice")
		}
		slots[i] = v
	}
	if err := expectDelim(dec, '}'); err != nil {
		return slots, refusal(ResultRefused, "card", "malformed JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return slots, refusal(ResultRefused, "card", "trailing data after the object")
	}
	return slots, nil
}

func slotIndex(key string) int {
	switch key {
	case SlotTokenizer:
		return 0
	case SlotPromptFormatter:
		return 1
	case SlotChatTemplateFile:
		return 2
	}
	return -1
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q", want)
	}
	return nil
}

func objectKey(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	key, ok := tok.(string)
	if !ok {
		return "", errors.New("object key is not a string")
	}
	return key, nil
}

// variant reads an externally tagged enum value: an object with exactly
// one key. A JSON null (or an absent slot) is no variant.
func variant(slot string, raw json.RawMessage) (string, json.RawMessage, error) {
	if raw == nil || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return "", nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := expectDelim(dec, '{'); err != nil {
		return "", nil, refusal(ResultRefused, slot, "not an object with one variant key")
	}
	var key string
	var val json.RawMessage
	for n := 0; dec.More(); n++ {
		k, err := objectKey(dec)
		if err != nil {
			return "", nil, refusal(ResultRefused, slot, "malformed JSON")
		}
		if n > 0 {
			return "", nil, refusal(ResultRefused, slot, "more than one variant key")
		}
		if err := dec.Decode(&val); err != nil {
			return "", nil, refusal(ResultRefused, slot, "malformed JSON")
		}
		key = k
	}
	if key == "" {
		return "", nil, refusal(ResultRefused, slot, "no variant key")
	}
	return key, val, nil
}

func parseTokenizerSlot(raw json.RawMessage) (*Artifact, error) {
	key, val, err := variant(SlotTokenizer, raw)
	if err != nil || key == "" {
		return nil, err
	}
	switch Kind(key) {
	case KindHFTokenizerJSON:
		f, err := parseCheckedFile(SlotTokenizer, val)
		if err != nil {
			return nil, err
		}
		return &Artifact{Kind: KindHFTokenizerJSON, File: f}, nil
	case KindTikTokenModel:
		return nil, refusal(ResultUnsupported, SlotTokenizer, "tik_token_model tokenizers are not supported (only hf_tokenizer_json)")
	}
	return nil, refusal(ResultUnsupported, SlotTokenizer, "unknown tokenizer kind %s", quoteBounded(key))
}

func parseFormatterSlot(slot string, raw json.RawMessage) (*Artifact, error) {
	key, val, err := variant(slot, raw)
	if err != nil || key == "" {
		return nil, err
	}
	switch key {
	case string(KindHFTokenizerConfigJSON):
		f, err := parseCheckedFile(slot, val)
		if err != nil {
			return nil, err
		}
		return &Artifact{Kind: KindHFTokenizerConfigJSON, File: f}, nil
	case string(KindHFChatTemplate), kindHFChatTemplateJinjaAlias:
		return parseTemplate(slot, KindHFChatTemplate, val)
	case string(KindHFChatTemplateJSON):
		return parseTemplate(slot, KindHFChatTemplateJSON, val)
	}
	return nil, refusal(ResultUnsupported, slot, "unknown prompt formatter kind %s", quoteBounded(key))
}

func parseTemplate(slot string, kind Kind, raw json.RawMessage) (*Artifact, error) {
	var w templateWire
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, refusal(ResultRefused, slot, "%s is not an object {is_custom, file}", kind)
	}
	f, err := parseCheckedFile(slot, w.File)
	if err != nil {
		return nil, err
	}
	return &Artifact{Kind: kind, IsCustom: w.IsCustom, File: f}, nil
}

func parseCheckedFile(slot string, raw json.RawMessage) (CheckedFile, error) {
	var w checkedFileWire
	if len(raw) == 0 || json.Unmarshal(raw, &w) != nil {
		return CheckedFile{}, refusal(ResultRefused, slot, "file is not an object {path, checksum, size}")
	}
	if w.Path == nil || w.Checksum == nil {
		return CheckedFile{}, refusal(ResultRefused, slot, "file needs both path and checksum")
	}
	sum, err := ParseChecksum(*w.Checksum)
	if err != nil {
		return CheckedFile{}, refusal(ResultRefused, slot, "%v", err)
	}
	f := CheckedFile{Path: *w.Path, Checksum: sum}
	if err := checkPath(f.Path); err != nil {
		return CheckedFile{}, refusal(ResultRefused, slot, "path: %v", err)
	}
	if _, err := parseLocation(f.Path); err != nil {
		return CheckedFile{}, &Error{Result: ResultOf(err), Where: slot, Reason: "path", Err: err}
	}
	if w.Size != nil {
		f.Size, f.HasSize = *w.Size, true
		if f.Size > MaxArtifactBytes {
			return CheckedFile{}, refusal(ResultTooLarge, slot, "declared size %d bytes, limit %d", f.Size, MaxArtifactBytes)
		}
	}
	return f, nil
}

// checkPath bounds a path before anything else looks at it.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty")
	case len(p) > MaxPathBytes:
		return fmt.Errorf("%d bytes, limit %d", len(p), MaxPathBytes)
	case !utf8.ValidString(p):
		return errors.New("not valid UTF-8")
	case strings.ContainsFunc(p, unicode.IsControl):
		return errors.New("contains control characters")
	}
	return nil
}

// quoteBounded quotes fleet text for an error message, cut to a length
// that keeps logs readable.
func quoteBounded(s string) string {
	const limit = 64
	if len(s) > limit {
		s = strings.ToValidUTF8(s[:limit], "") + "…"
	}
	return fmt.Sprintf("%q", s)
}
